//! Embeds every payload the manifest lists, and every stream file, so that tests on every host
//! (native, headless Chromium, wasm-pack) read the same bytes with no filesystem at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let corpus = manifest_dir.join("../../tests/fixtures/kv-events").canonicalize().expect(
        "tests/fixtures/kv-events is missing: copy the shared fixture corpus into the repository",
    );
    let manifest_path = corpus.join("manifest.json");
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    let manifest = std::fs::read_to_string(&manifest_path).expect("read manifest.json");

    // The manifest is an array of objects with a "file" key; a tiny scan avoids a JSON
    // build-dependency.
    let mut files: Vec<String> = manifest
        .split("\"file\":")
        .skip(1)
        .map(|rest| {
            let rest = rest.trim_start().strip_prefix('"').expect("file is a string");
            rest[..rest.find('"').expect("closing quote")].to_owned()
        })
        .collect();
    let mut streams = Vec::new();
    for dir in std::fs::read_dir(&corpus).expect("list corpus") {
        let streams_dir = dir.expect("dir entry").path().join("streams");
        if let Ok(entries) = std::fs::read_dir(&streams_dir) {
            println!("cargo:rerun-if-changed={}", streams_dir.display());
            for e in entries {
                let path = e.expect("stream entry").path();
                if path.extension().is_some_and(|x| x == "jsonl") {
                    streams.push(rel(&corpus, &path));
                }
            }
        }
    }
    files.sort();
    streams.sort();

    let mut out = String::new();
    writeln!(out, "pub(crate) static MANIFEST_JSON: &str = include_str!({:?});", manifest_path.display().to_string()).unwrap();
    writeln!(out, "pub(crate) static PAYLOADS: &[(&str, &[u8])] = &[").unwrap();
    for f in &files {
        writeln!(out, "    ({f:?}, include_bytes!({:?})),", corpus.join(f).display().to_string()).unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "pub(crate) static STREAMS: &[(&str, &str)] = &[").unwrap();
    for s in &streams {
        writeln!(out, "    ({s:?}, include_str!({:?})),", corpus.join(s).display().to_string()).unwrap();
    }
    writeln!(out, "];").unwrap();
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded.rs");
    std::fs::write(dest, out).expect("write embedded.rs");
}

fn rel(base: &Path, path: &Path) -> String {
    path.strip_prefix(base).expect("under corpus").to_string_lossy().replace('\\', "/")
}
