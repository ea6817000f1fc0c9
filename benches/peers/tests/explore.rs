use kvscope_peer_bench::dynamo;
#[test]
fn explore() {
    let mut n = 0;
    for e in kvscope_corpus::manifest() {
        match dynamo::decode(e.payload()) {
            Ok(b) => {
                let _ = b;
            }
            Err(err) => {
                n += 1;
                println!("REJECT {} :: {}", e.file, err);
            }
        }
    }
    println!("rejected {n}");
    for f in ["vllm-0.33.0/kimi_k3_agg-w0-09.msgpack", "sglang-0.5.23/sglang-3.msgpack", "vllm-0.22.0/hybrid_groups.msgpack", "vllm-0.33.0/edge-8.msgpack"] {
        let b = dynamo::decode(kvscope_corpus::payload(f).unwrap()).unwrap();
        for ev in &b.events { let mut v = dynamo::view(ev); v.block_hashes.truncate(2); println!("{f}: {v:?}"); }
    }
}
