//! Golden reports: `check --json` on captures made from the embedded corpus, pinned byte for
//! byte in `server/tests/golden/check/`. A change that alters the report updates the file on
//! purpose: `KVSCOPE_BLESS=1 cargo test -p kvscope check::tests` rewrites them.

use std::path::{Path, PathBuf};

use kvscope_corpus::dynamo_plane;
use kvscope_normalize::Policy;
use kvscope_protocol as proto;

use super::{CheckOptions, check};
use crate::stream::StreamOptions;

/// Receive times start here (2025-12-06T05:33:20Z) and step 1 ms a record, so reports that
/// print times are the same on every run.
const T0: u64 = 1_765_000_000_000_000_000;

struct Source {
    info: proto::SourceInfo,
}

fn engine(index: u32, worker_id: &str, dp_rank: u32) -> Source {
    Source {
        info: proto::SourceInfo {
            index,
            key: format!("{worker_id}:{dp_rank}"),
            worker_id: worker_id.to_owned(),
            dp_rank,
            endpoint: format!("tcp://127.0.0.1:{}", 5557 + index),
            replay_endpoint: None,
            kind: proto::SourceKind::Engine,
            event_plane: None,
            block_size: None,
        },
    }
}

fn plane(index: u32, url: &str) -> Source {
    Source {
        info: proto::SourceInfo {
            index,
            key: format!("plane:{url}"),
            worker_id: String::new(),
            dp_rank: 0,
            endpoint: url.to_owned(),
            replay_endpoint: None,
            kind: proto::SourceKind::EventPlane,
            event_plane: Some(proto::EventPlaneInfo { url: url.to_owned(), subject: Some("namespace.>".to_owned()) }),
            block_size: None,
        },
    }
}

/// One record: the source's index and its frames.
type Record = (u32, Vec<Vec<u8>>);

fn engine_frames(seq: u64, payload: &[u8]) -> Vec<Vec<u8>> {
    vec![Vec::new(), seq.to_be_bytes().to_vec(), payload.to_vec()]
}

fn write_capture(dir: &Path, name: &str, sources: &[Source], records: &[Record]) -> PathBuf {
    let path = dir.join(format!("{name}.kvcap"));
    let mut out = Vec::new();
    let header = proto::capture::CaptureHeader {
        created_unix_nanos: T0,
        kvscope_version: "golden".to_owned(),
        sources: sources.iter().map(|s| s.info.clone()).collect(),
        note: None,
    };
    proto::capture::write_header(&mut out, &header).unwrap();
    for (i, (source, frames)) in records.iter().enumerate() {
        out.extend(proto::capture::encode_record_parts(*source, T0 + i as u64 * 1_000_000, false, frames));
    }
    std::fs::write(&path, out).unwrap();
    path
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvscope-check-golden-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The report's JSON, with the temporary file name replaced, against the golden file.
fn assert_golden(name: &str, capture: &Path, opts: &CheckOptions) {
    let report = check(capture, opts).unwrap();
    let mut json = serde_json::to_value(&report).unwrap();
    json["file"] = serde_json::Value::from(format!("{name}.kvcap"));
    let text = serde_json::to_string_pretty(&json).unwrap() + "\n";
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/check").join(format!("{name}.json"));
    let table_golden = golden.with_extension("txt");
    let table = super::table(&report).replace(&capture.display().to_string(), &format!("{name}.kvcap"));
    if std::env::var_os("KVSCOPE_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &text).unwrap();
        std::fs::write(&table_golden, &table).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| panic!("{}: {e} (KVSCOPE_BLESS=1 writes it)", golden.display()));
    assert!(text == want, "check --json of {name} differs from {}:\n{text}", golden.display());
    let want = std::fs::read_to_string(&table_golden).unwrap();
    assert!(table == want, "check's table of {name} differs from {}:\n{table}", table_golden.display());
}

fn options(block_size: u32, policy: Policy) -> CheckOptions {
    CheckOptions {
        block_size,
        policy,
        relay_policy: Policy::DYNAMO_1_6_1,
        index_max_nodes: kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS,
        stream: StreamOptions::default(),
    }
}

#[test]
fn kimi_k3_incident_under_legacy_and_fixed() {
    let sources: Vec<Source> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(|w| engine(w, &format!("w{w}"), 0)).collect();
    let mut records = Vec::new();
    let streams: Vec<_> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(kvscope_corpus::kimi_k3_stream).collect();
    for i in 0..streams.iter().map(Vec::len).max().unwrap() {
        for (w, stream) in streams.iter().enumerate() {
            if let Some(m) = stream.get(i) {
                records.push((w as u32, engine_frames(m.seq, m.payload)));
            }
        }
    }
    let dir = scratch("kimi");
    let capture = write_capture(&dir, "kimi-k3", &sources, &records);
    assert_golden("kimi-k3-legacy", &capture, &options(1536, Policy::LEGACY));
    assert_golden("kimi-k3-fixed", &capture, &options(1536, Policy::FIXED));
    // A bound of 4 nodes (--index-max-nodes): the report counts what it kept out, and says so.
    let bounded = check(&capture, &CheckOptions { index_max_nodes: 4, ..options(1536, Policy::FIXED) }).unwrap();
    assert!(bounded.index.refused_blocks > 0, "{:?}", bounded.index);
    assert!(super::table(&bounded).contains(&format!(
        "index bound of 4 nodes reached: {} stores and blocks not modelled; the index figures are short of them (raise with \
         --index-max-nodes N)",
        bounded.index.refused_blocks
    )));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn dynamo_event_plane_fixture_reconciled() {
    for tag in ["nats_map", "nats_map_media"] {
        let worker = dynamo_plane::WORKER_ID.to_string();
        let sources = [engine(0, &worker, 0), plane(1, "nats://127.0.0.1:4222")];
        let mut records: Vec<Record> = dynamo_plane::sent(tag).unwrap().iter().map(|b| (0, engine_frames(b.seq, &b.payload))).collect();
        let subject = b"namespace.dynamo.component.backend.endpoint.generate.kv-events".to_vec();
        records.extend(dynamo_plane::messages(tag).unwrap().into_iter().map(|m| (1, vec![subject.clone(), m.to_vec()])));
        let dir = scratch(tag);
        let capture = write_capture(&dir, tag, &sources, &records);
        assert_golden(&format!("plane-{tag}"), &capture, &options(dynamo_plane::KV_BLOCK_SIZE, Policy::DYNAMO_1_6_1));
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn vllm_0_33_corpus_stream_under_fixed() {
    let names: Vec<&str> = kvscope_corpus::manifest()
        .iter()
        .filter(|e| e.file.starts_with("vllm-0.33.0/") && !e.file.contains("kimi_k3"))
        .map(|e| e.file.as_str())
        .collect();
    assert_eq!(names.len(), 17);
    let sources = [engine(0, "7", 0)];
    let records: Vec<Record> =
        names.iter().enumerate().map(|(seq, n)| (0, engine_frames(seq as u64, kvscope_corpus::payload(n).unwrap()))).collect();
    let dir = scratch("vllm033");
    let capture = write_capture(&dir, "vllm-0.33", &sources, &records);
    assert_golden("vllm-0.33-fixed", &capture, &options(16, Policy::FIXED));
    assert_golden("vllm-0.33-dynamo", &capture, &options(16, Policy::DYNAMO_1_6_1));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A discovered engine of another model is read at its own block size: the Kimi-K3 stream of
/// one worker, its source at 1536 and the check at `--block-size 16`, is indexed and reported as
/// a check at 1536 reads it.
#[test]
fn a_source_at_its_own_block_size_is_indexed_and_reported_at_it() {
    let stream = kvscope_corpus::kimi_k3_stream(0);
    let records: Vec<Record> = stream.iter().map(|m| (0, engine_frames(m.seq, m.payload))).collect();
    let dir = scratch("own-block-size");
    let plain = write_capture(&dir, "plain", &[engine(0, "w0", 0)], &records);
    let mut own = engine(0, "w0", 0);
    own.info.block_size = Some(1536);
    let own = write_capture(&dir, "own", &[own], &records);
    let at_own = check(&own, &options(16, Policy::FIXED)).unwrap();
    let at_flag = check(&plain, &options(1536, Policy::FIXED)).unwrap();
    let at_16 = check(&plain, &options(16, Policy::FIXED)).unwrap();
    assert_eq!([at_own.sources[0].block_size, at_flag.sources[0].block_size, at_16.sources[0].block_size], [1536, 1536, 16]);
    assert_eq!(at_own.sources[0].index, at_flag.sources[0].index);
    assert!(at_own.sources[0].index.engine_prefix_tokens > 0, "{:?}", at_own.sources[0].index);
    assert_ne!(at_16.sources[0].index, at_flag.sources[0].index, "the block size the index reads at shows");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A capture with a real index read in it: the `four` stream and, after it, the `/dump` Dynamo
/// 1.6.1's standalone indexer answered for that stream (tests/fixtures/dynamo-indexer). The
/// report's real index equals the model's: 16 host blocks, no device block.
#[test]
fn a_recorded_dump_of_the_real_index_is_compared_with_the_model() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/dynamo-indexer");
    let names = ["gpu_basic", "cpu_offload_self_describing", "mooncake_lowercase_cpu-1", "storage_tier"];
    let mut index = plane(1, "http://127.0.0.1:8090");
    index.info.kind = proto::SourceKind::RouterIndex;
    index.info.key = "index:http://127.0.0.1:8090".to_owned();
    index.info.event_plane = None;
    let sources = [engine(0, "7", 0), index];
    let mut records: Vec<Record> = names
        .iter()
        .enumerate()
        .map(|(seq, n)| (0, engine_frames(seq as u64, kvscope_corpus::payload(&format!("vllm-0.33.0/{n}.msgpack")).unwrap())))
        .collect();
    records.push((1, vec![b"workers".to_vec(), std::fs::read(fixtures.join("four.workers.json")).unwrap()]));
    records.push((1, vec![b"dump".to_vec(), std::fs::read(fixtures.join("four.dump.json")).unwrap()]));
    let dir = scratch("four-real");
    let capture = write_capture(&dir, "four-real", &sources, &records);
    let report = check(&capture, &options(16, Policy::DYNAMO_1_6_1)).unwrap();
    let ri = &report.router_indexes[0];
    assert_eq!((ri.reads, ri.dumps, ri.errors, ri.differences), (2, 1, 0, 0), "{:#?}", ri.first_differences);
    let real = report.sources[0].index_real.as_ref().unwrap();
    assert_eq!(real.counts.tiers["host_pinned"].router_blocks, 16);
    assert_eq!(real.counts.tiers.get("device").map_or(0, |t| t.router_blocks), 0);
    assert_eq!(real.counts, report.sources[0].index);
    assert!(report.index_divergence());
    assert_golden("four-real", &capture, &options(16, Policy::DYNAMO_1_6_1));
    std::fs::remove_dir_all(dir).unwrap();
}
