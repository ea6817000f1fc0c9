//! Checks that the dashboard (Trunk's `dist/`) is there to embed.
//!
//! Without `dist/index.html` the build still succeeds by default, so that `cargo test` and docs
//! work on a machine without the wasm toolchain; the binary then serves a page naming the
//! command that builds the dashboard. With `KVSCOPE_REQUIRE_WEB=1` (release builds, CI) a
//! missing dashboard is a build error instead.

use std::path::Path;

fn main() {
    // Read at run time, not baked in with env!(): a build script binary can be reused for a
    // checkout at another path (worktrees sharing a target dir), and must look at that one's dist/.
    // Cargo sets it, and also runs build scripts in the package's directory: "." is the fallback.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into());
    let dist = Path::new(&manifest_dir).join("../dist");
    let index = dist.join("index.html");
    println!("cargo:rerun-if-env-changed=KVSCOPE_REQUIRE_WEB");
    println!("cargo:rerun-if-changed={}", dist.display());
    println!("cargo:rerun-if-changed={}", index.display());
    // A stamp that changes whenever the dashboard is rebuilt, so the embedding crate is
    // recompiled even when dist/ appeared after the last build.
    let stamp = std::fs::metadata(&index)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    println!("cargo:rustc-env=KVSCOPE_WEB_STAMP={stamp}");
    if !index.exists() {
        let message = format!(
            "the dashboard is not built: {} is missing. Run scripts/build-web.sh (it builds web/ with Trunk into dist/), then build kvscope again",
            index.display()
        );
        if std::env::var("KVSCOPE_REQUIRE_WEB").is_ok_and(|v| v == "1") {
            panic!("{message} (KVSCOPE_REQUIRE_WEB=1 makes this an error; unset it to build without the dashboard)");
        }
        println!("cargo:warning={message}; this binary will serve a page saying so");
    }
}
