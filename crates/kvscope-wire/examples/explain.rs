//! Decodes payload files given on the command line and prints each batch or the error.
//!
//! `cargo run -p kvscope-wire --example explain -- tests/fixtures/kv-events/vllm-0.33.0/edge-1.msgpack`

fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{path}: cannot read: {e}");
                failed = true;
                continue;
            }
        };
        match kvscope_wire::decode_batch(&bytes) {
            Ok(batch) => println!("{path}: {batch:#?}"),
            Err(e) => {
                println!("{path}: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(i32::from(failed));
}
