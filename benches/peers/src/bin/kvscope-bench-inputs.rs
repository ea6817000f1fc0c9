//! Writes the benchmark inputs to a directory, for the hosts that are not Rust (scripts/bench_msgspec.py).
//!
//! `kvscope-bench-inputs DIR` writes, per workload, `DIR/<name>.frames` (each payload as a
//! little-endian u32 length followed by its bytes, in stream order) and `DIR/inputs.json`
//! (name, description, block size, payload, event and byte counts).

// Benchmark code: a failed expect aborts the measurement, with its location.
#![allow(clippy::expect_used)]

use std::io::Write;
use std::path::PathBuf;

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: kvscope-bench-inputs DIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let mut index = Vec::new();
    for w in kvscope_peer_bench::inputs::all() {
        let path = dir.join(format!("{}.frames", w.name));
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(&path).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display())));
        for p in w.payloads() {
            out.write_all(&(p.bytes.len() as u32).to_le_bytes()).and_then(|_| out.write_all(&p.bytes)).expect("write");
        }
        out.flush().expect("write");
        index.push(format!(
            "  {{\"name\": {:?}, \"about\": {:?}, \"block_size\": {}, \"payloads\": {}, \"events\": {}, \"bytes\": {}}}",
            w.name,
            w.about,
            w.block_size,
            w.payload_count(),
            w.total_events(),
            w.total_bytes()
        ));
    }
    let json = format!("[\n{}\n]\n", index.join(",\n"));
    std::fs::write(dir.join("inputs.json"), json).expect("write inputs.json");
    eprintln!("wrote {} workloads to {}", index.len(), dir.display());
}
