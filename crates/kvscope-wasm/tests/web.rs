//! Browser tests, run in headless Chromium:
//! `wasm-pack test --headless --chrome crates/kvscope-wasm`.
//!
//! Three hosts run the shared vector table here: the reference normalizer host and the session
//! host (Rust side, compiled to wasm), and the JS-facing API (the `#[wasm_bindgen]` methods,
//! whose `JsValue` results are read back and compared). Each asserts how many cases it ran. The
//! corpus check decodes every real-release payload in the browser.

// Test code (wasm_bindgen_test, which clippy does not count as #[test]): a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_arch = "wasm32")]

use kvscope_corpus::vectors::{NativeHost, VectorCase, VectorHost, VectorOutput, case_count, run_vectors};
use kvscope_wasm::KvScope;
use kvscope_wasm::model::{JsCounters, JsPushResult, JsSource};

mod host;
use host::{SessionHost, push_outputs, source_output};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn vectors_run_in_the_browser_through_the_rust_api() {
    let expected = case_count();
    assert!(expected > 0);
    let native = run_vectors(&mut NativeHost::new(kvscope_corpus::payload));
    native.assert_ok(expected);
    let session = run_vectors(&mut SessionHost::new(kvscope_corpus::payload));
    session.assert_ok(expected);
    assert_eq!(session.tree_checks_skipped, 0);
}

/// Goes through the exported `KvScope` methods only and reads their `JsValue`s back.
struct JsApiHost;

fn js_err(e: impl Into<JsValue>) -> String {
    format!("{:?}", e.into())
}

/// Checks a result is a plain JS object (not a `Map`), then reads it back.
fn read<T: serde::de::DeserializeOwned>(value: JsValue) -> Result<T, String> {
    if !value.is_object() || value.is_instance_of::<js_sys::Map>() {
        return Err(format!("expected a plain JS object, got {value:?}"));
    }
    serde_wasm_bindgen::from_value(value).map_err(|e| e.to_string())
}

impl VectorHost for JsApiHost {
    fn name(&self) -> &str {
        "wasm-js-api"
    }

    fn corpus_payload(&self, file: &str) -> Option<Vec<u8>> {
        kvscope_corpus::payload(file).map(<[u8]>::to_vec)
    }

    fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
        let mut kv = KvScope::new(case.block_size, case.policy).map_err(js_err)?;
        if kv.policy() != case.policy || kv.block_size() != case.block_size {
            return Err("getters disagree with the constructor".into());
        }
        let mut out = VectorOutput::default();
        for (i, frame) in case.frames.iter().enumerate() {
            let value = if i % 2 == 0 {
                // Seq as a BigInt on even frames, exercising that conversion.
                let seq = js_sys::BigInt::from(frame.seq);
                kv.push_payload(&frame.worker_id, frame.dp_rank, seq.into(), &frame.payload)
            } else {
                let frames = js_sys::Array::of3(
                    &js_sys::Uint8Array::from(b"kv-events".as_slice()),
                    &js_sys::Uint8Array::from(frame.seq.to_be_bytes().as_slice()),
                    &js_sys::Uint8Array::from(frame.payload.as_slice()),
                );
                kv.push_frames(&frame.worker_id, frame.dp_rank, frames)
            }
            .map_err(js_err)?;
            // A JS caller reads fields directly.
            let verdicts = js_sys::Reflect::get(&value, &"verdicts".into()).map_err(js_err)?;
            if !js_sys::Array::is_array(&verdicts) {
                return Err("result.verdicts is not an array".into());
            }
            let r: JsPushResult = read(value)?;
            out.verdicts.extend(push_outputs(&r));
        }
        let sources: Vec<JsSource> = read(kv.sources().map_err(js_err)?)?;
        for src in sources {
            let c: JsCounters = read(kv.counters(&src.worker_id, src.dp_rank).map_err(js_err)?)?;
            out.sources.push(source_output(&c));
        }
        Ok(out)
    }
}

#[wasm_bindgen_test]
fn vectors_run_through_the_js_facing_api() {
    let report = run_vectors(&mut JsApiHost);
    report.assert_ok(case_count());
    assert_eq!(report.tree_checks_skipped, 0);
}

#[wasm_bindgen_test]
fn corpus_check_passes_in_the_browser() {
    let report = kvscope_corpus::check_manifest();
    assert!(report.checked > 0, "the embedded corpus is empty");
    report.assert_ok();
}

/// The message of a thrown JS `Error`.
fn message(e: wasm_bindgen::JsError) -> String {
    let value: JsValue = e.into();
    value.dyn_into::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_else(|v| format!("{v:?}"))
}

#[wasm_bindgen_test]
fn js_api_reports_errors_that_say_what_to_pass() {
    let e = KvScope::new(16, "strict").err().map(message).unwrap();
    assert_eq!(e, "unknown policy \"strict\"; pass one of: fixed, legacy, dynamo-1.6.1");
    let mut kv = KvScope::new(16, "fixed").unwrap();
    let e = kv.push_payload("w0", 0, JsValue::from_f64(-1.0), b"\x90").err().map(message).unwrap();
    assert_eq!(e, "seq -1 is not a non-negative safe integer; pass a BigInt for larger values");
    let e = kv.counters("w9", 0).err().map(message).unwrap();
    assert_eq!(e, "no source w9:0 yet; push a frame or payload for it first");
    kv.push_payload("w0", 0, JsValue::from_f64(3.0), b"\x93\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x90\x00").unwrap();
    let e = kv.tree_summary("w0", 0, "gpu", 3).err().map(message).unwrap();
    assert_eq!(e, "unknown tier \"gpu\"; pass one of: device, host_pinned, disk, external");
    let policies: Vec<kvscope_wasm::model::JsPolicy> = read(KvScope::policies().unwrap()).unwrap();
    assert_eq!(policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["fixed", "legacy", "dynamo-1.6.1"]);
    let rules: Vec<kvscope_wasm::model::JsRule> = read(KvScope::rules().unwrap()).unwrap();
    assert_eq!(rules.len(), kvscope_normalize::RULES.len());
    let labels: Vec<kvscope_wasm::model::JsLabel> = read(KvScope::labels().unwrap()).unwrap();
    assert_eq!(labels.iter().map(|l| l.label).collect::<Vec<_>>(), kvscope_normalize::VerdictLabel::ALL);
}

/// The incident through the JS API: three workers' Kimi-K3 streams as live frames, at 1536
/// under fixed (no fatal, cpu stores skipped) and under legacy (fatal at seq 8).
#[wasm_bindgen_test]
fn kimi_k3_incident_through_the_js_api() {
    for (policy, fatal_seq) in [("fixed", None), ("legacy", Some(8))] {
        let mut kv = KvScope::new(1536, policy).unwrap();
        for w in 0..kvscope_corpus::KIMI_K3_WORKERS {
            for m in kvscope_corpus::kimi_k3_stream(w) {
                let frames = js_sys::Array::of3(
                    &js_sys::Uint8Array::from(m.topic.as_bytes()),
                    &js_sys::Uint8Array::from(m.seq.to_be_bytes().as_slice()),
                    &js_sys::Uint8Array::from(m.payload),
                );
                let r: JsPushResult = read(kv.push_frames(&format!("w{w}"), 0, frames).unwrap()).unwrap();
                assert!(r.ok, "{:?}", r.error);
            }
            let c: JsCounters = read(kv.counters(&format!("w{w}"), 0).unwrap()).unwrap();
            assert_eq!(c.first_fatal.as_ref().map(|l| l.seq), fatal_seq, "w{w} [{policy}]");
            if policy == "fixed" {
                assert_eq!(c.verdicts_by_label.get("offload_block_size_mismatch"), Some(&2));
                assert_eq!(c.trees["device"], 16);
            }
        }
    }
}
