//! Embeds every payload the manifest lists, every stream file, and Dynamo's event-plane fixtures, so that tests on every host
//! (native, headless Chromium, wasm-pack) read the same bytes with no filesystem at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A failed build script prints this error and fails the build.
fn main() -> Result<(), String> {
    // Cargo sets it, and also runs build scripts in the package's directory: "." is the fallback.
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()));
    let corpus = manifest_dir
        .join("../../tests/fixtures/kv-events")
        .canonicalize()
        .map_err(|_| "tests/fixtures/kv-events is missing: copy the shared fixture corpus into the repository".to_owned())?;
    let manifest_path = corpus.join("manifest.json");
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    let manifest = std::fs::read_to_string(&manifest_path).map_err(|e| format!("read manifest.json: {e}"))?;

    // The manifest is an array of objects with a "file" key; a tiny scan avoids a JSON
    // build-dependency.
    let mut files: Vec<String> = Vec::new();
    for rest in manifest.split("\"file\":").skip(1) {
        let file = rest
            .trim_start()
            .strip_prefix('"')
            .and_then(|rest| rest.split_once('"'))
            .map(|(file, _)| file.to_owned())
            .ok_or_else(|| format!("{}: a \"file\" value is not a string", manifest_path.display()))?;
        files.push(file);
    }
    let mut streams = Vec::new();
    let list_err = |e: std::io::Error| format!("list {}: {e}", corpus.display());
    for dir in std::fs::read_dir(&corpus).map_err(list_err)? {
        let streams_dir = dir.map_err(list_err)?.path().join("streams");
        if let Ok(entries) = std::fs::read_dir(&streams_dir) {
            println!("cargo:rerun-if-changed={}", streams_dir.display());
            for e in entries {
                let path = e.map_err(|e| format!("list {}: {e}", streams_dir.display()))?.path();
                if path.extension().is_some_and(|x| x == "jsonl") {
                    streams.push(rel(&corpus, &path));
                }
            }
        }
    }
    files.sort();
    streams.sort();

    // fmt::Write for String never fails: the results are discarded.
    let mut out = String::new();
    let _ = writeln!(out, "pub(crate) static MANIFEST_JSON: &str = include_str!({:?});", manifest_path.display().to_string());
    let _ = writeln!(out, "pub(crate) static PAYLOADS: &[(&str, &[u8])] = &[");
    for f in &files {
        let _ = writeln!(out, "    ({f:?}, include_bytes!({:?})),", corpus.join(f).display().to_string());
    }
    let _ = writeln!(out, "];");
    let _ = writeln!(out, "pub(crate) static STREAMS: &[(&str, &str)] = &[");
    for s in &streams {
        let _ = writeln!(out, "    ({s:?}, include_str!({:?})),", corpus.join(s).display().to_string());
    }
    let _ = writeln!(out, "];");

    // Dynamo's event plane (tests/fixtures/dynamo-event-plane): every file, by name.
    let plane = manifest_dir
        .join("../../tests/fixtures/dynamo-event-plane")
        .canonicalize()
        .map_err(|_| "tests/fixtures/dynamo-event-plane is missing: copy the shared fixtures into the repository".to_owned())?;
    println!("cargo:rerun-if-changed={}", plane.display());
    let list_err = |e: std::io::Error| format!("list {}: {e}", plane.display());
    let mut plane_files = Vec::new();
    for entry in std::fs::read_dir(&plane).map_err(list_err)? {
        let path = entry.map_err(list_err)?.path();
        if path.extension().is_some_and(|x| x == "bin" || x == "json") {
            plane_files.push(rel(&plane, &path));
        }
    }
    plane_files.sort();
    let _ = writeln!(out, "pub(crate) static DYNAMO_PLANE: &[(&str, &[u8])] = &[");
    for f in &plane_files {
        let _ = writeln!(out, "    ({f:?}, include_bytes!({:?})),", plane.join(f).display().to_string());
    }
    let _ = writeln!(out, "];");
    let out_dir = std::env::var_os("OUT_DIR").ok_or("cargo did not set OUT_DIR")?;
    let dest = PathBuf::from(out_dir).join("embedded.rs");
    std::fs::write(&dest, out).map_err(|e| format!("write {}: {e}", dest.display()))
}

/// `path` relative to `base` (read_dir under `base` yields only such paths), with `/`.
fn rel(base: &Path, path: &Path) -> String {
    path.strip_prefix(base).unwrap_or(path).to_string_lossy().replace('\\', "/")
}
