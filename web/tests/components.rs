//! Component tests in headless Chromium (`wasm-pack test --headless --chrome web --release`):
//! the dashboard is mounted on a fresh element, fed protocol messages built from the corpus's
//! Kimi-K3 incident streams, and read back through the same `data-testid` hooks the end-to-end
//! tests and people's scripts use. The expected numbers come from running the normalizer
//! directly over the same bytes.

// Test code (wasm_bindgen_test, which clippy does not count as #[test]): a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;

use kvscope_normalize::{Normalizer, Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_protocol as proto;
use kvscope_web::contexts::{Fleet, provide_fleet};
use kvscope_web::model::settings::Settings;
use kvscope_web::views::app::Dashboard;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

thread_local! {
    static FLEET: RefCell<Option<Fleet>> = const { RefCell::new(None) };
}

/// Mounts the dashboard (no socket) on a fresh element; returns the element and the fleet.
fn mount() -> (web_sys::HtmlElement, Fleet, leptos::mount::UnmountHandle<impl leptos::tachys::view::Mountable>) {
    let document = web_sys::window().unwrap().document().unwrap();
    let el: web_sys::HtmlElement = document.create_element("div").unwrap().unchecked_into();
    document.body().unwrap().append_child(&el).unwrap();
    let handle = leptos::mount::mount_to(el.clone(), || {
        let fleet = provide_fleet(Settings { offline: true, ..Settings::default() });
        FLEET.with(|f| *f.borrow_mut() = Some(fleet));
        view! { <Dashboard /> }
    });
    let fleet = FLEET.with(|f| f.borrow().expect("mounted"));
    (el, fleet, handle)
}

fn hello(workers: u32, block_size: u32) -> proto::Message {
    proto::Message::Hello(proto::Hello {
        protocol_version: proto::PROTOCOL_VERSION,
        server_version: "test".into(),
        mode: proto::ServerMode::Demo,
        mode_detail: "kimi_k3 from the corpus".into(),
        sources: (0..workers)
            .map(|i| proto::SourceInfo {
                index: i,
                key: format!("{i}:0"),
                worker_id: i.to_string(),
                dp_rank: 0,
                endpoint: String::new(),
                replay_endpoint: None,
                kind: proto::SourceKind::Engine,
                event_plane: None,
            })
            .collect(),
        defaults: proto::Defaults { block_size, policy_a: "legacy".into(), policy_b: "fixed".into() },
        history_bytes: 0,
        client_queue_bytes: 0,
        started_unix_nanos: 0,
    })
}

fn kimi_messages() -> Vec<Vec<u8>> {
    let mut out = vec![proto::encode(&hello(3, 1536))];
    for w in 0..3u32 {
        for (i, m) in kvscope_corpus::kimi_k3_stream(w).into_iter().enumerate() {
            out.push(proto::encode(&proto::Message::Frame(proto::Frame {
                source: w,
                seq: m.seq,
                recv_time_nanos: 1_000_000_000 + i as u64 * 20_000_000 + u64::from(w),
                replayed: false,
                topic: m.topic.as_bytes().to_vec(),
                payload: m.payload.to_vec(),
            })));
        }
    }
    out
}

/// Feeds messages as the socket would, then flushes and lets the views update.
async fn feed(fleet: Fleet, messages: &[Vec<u8>]) {
    for m in messages {
        fleet.ingest(m);
    }
    fleet.flush();
    leptos::task::tick().await;
}

fn q(root: &web_sys::HtmlElement, css: &str) -> Vec<web_sys::Element> {
    let list = root.query_selector_all(css).unwrap();
    (0..list.length()).filter_map(|i| list.item(i)?.dyn_into().ok()).collect()
}

fn card(root: &web_sys::HtmlElement, worker: u32, dp: u32) -> web_sys::Element {
    let css = format!("[data-testid=\"worker-card\"][data-worker=\"{worker}\"][data-dp-rank=\"{dp}\"]");
    root.query_selector(&css).unwrap().unwrap_or_else(|| panic!("no card {css}"))
}

fn number(el: &web_sys::Element) -> u64 {
    el.text_content().unwrap_or_default().trim().parse().unwrap_or_else(|_| panic!("not a number: {:?}", el.text_content()))
}

fn verdict_count_css(policy: &str, kind: &str, reason: &str) -> String {
    format!("[data-testid=\"verdict-count\"][data-policy=\"{policy}\"][data-kind=\"{kind}\"][data-reason=\"{reason}\"]")
}

/// The count a card shows; a missing cell fails the test (it must never read as 0).
fn verdict_count(card: &web_sys::Element, policy: &str, kind: &str, reason: &str) -> u64 {
    let css = verdict_count_css(policy, kind, reason);
    number(&card.query_selector(&css).unwrap().unwrap_or_else(|| panic!("no {css} on the card")))
}

/// Asserts what a card shows for a class: `want` in its cell, or, for `want == 0` only, no cell
/// at all (cards list the classes that occurred).
fn assert_verdict_count(card: &web_sys::Element, policy: &str, kind: &str, reason: &str, want: u64, what: &str) {
    match card.query_selector(&verdict_count_css(policy, kind, reason)).unwrap() {
        Some(cell) => assert_eq!(number(&cell), want, "{what}"),
        None => assert_eq!(want, 0, "{what}: no cell on the card, but {want} events expected"),
    }
}

fn tier_count(card: &web_sys::Element, tier: &str) -> u64 {
    number(&card.query_selector(&format!("[data-testid=\"tier-count\"][data-tier=\"{tier}\"]")).unwrap().unwrap())
}

fn reference(worker: u32, policy: &str) -> kvscope_normalize::SourceCounters {
    let mut n = Normalizer::new(1536, policy.parse::<Policy>().unwrap());
    let id = n.source(&worker.to_string(), 0);
    let mut out = Vec::new();
    for m in kvscope_corpus::kimi_k3_stream(worker) {
        let _ = n.push_payload(id, m.seq, m.payload, &mut out);
    }
    n.counters(id).clone()
}

#[wasm_bindgen_test]
async fn cards_show_the_kimi_counts_under_both_policies() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_messages()).await;
    assert_eq!(q(&root, "[data-testid=\"worker-card\"]").len(), 3);
    let mut checked = 0;
    for w in 0..3 {
        let c = card(&root, w, 0);
        for (side, policy) in [("a", "legacy"), ("b", "fixed")] {
            let r = reference(w, policy);
            for tier in StorageTier::ALL {
                let applied: u64 =
                    VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Apply).map(|l| r.verdicts(Some(tier), *l)).sum();
                assert_verdict_count(&c, side, "applied", tier.label(), applied, &format!("w{w} {policy} {tier}"));
                checked += 1;
            }
            for label in VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Skip) {
                assert_verdict_count(&c, side, "skipped", label.as_str(), r.verdicts_by_label(*label), &format!("w{w} {policy} {label}"));
                checked += 1;
            }
            assert_verdict_count(&c, side, "fatal", "block_size_mismatch", r.fatal_count, &format!("w{w} {policy}"));
        }
        // Legacy: the cpu stores are fatal; fixed: the same stores skipped on host_pinned.
        let fatal_a = verdict_count(&c, "a", "fatal", "block_size_mismatch");
        assert!(fatal_a > 0);
        assert_eq!(verdict_count(&c, "b", "skipped", "offload_block_size_mismatch"), fatal_a);
        assert!(c.query_selector("[data-testid=\"disagree\"]").unwrap().is_some(), "the card says the policies disagree");
        // Tier trees (policy B): the Device tree holds blocks, host_pinned what removals left.
        assert!(tier_count(&c, "device") > 0);
        assert_eq!(tier_count(&c, "disk"), 0);
    }
    assert!(checked > 0);
}

#[wasm_bindgen_test]
async fn a_second_hello_resets_so_resent_history_is_counted_once() {
    let (root, fleet, _handle) = mount();
    let messages = kimi_messages();
    feed(fleet, &messages).await;
    let before = verdict_count(&card(&root, 0, 0), "b", "applied", "device");
    feed(fleet, &messages).await; // a reconnect: hello, then the same history again
    assert_eq!(verdict_count(&card(&root, 0, 0), "b", "applied", "device"), before);
    assert!(before > 0);
}

#[wasm_bindgen_test]
async fn the_timeline_draws_both_policies_per_worker() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_messages()).await;
    let canvas: web_sys::HtmlCanvasElement =
        root.query_selector("[data-testid=\"timeline\"] canvas").unwrap().unwrap().unchecked_into();
    assert!(canvas.width() > 0 && canvas.height() > 0);
    let ctx: web_sys::CanvasRenderingContext2d = canvas.get_context("2d").unwrap().unwrap().unchecked_into();
    let data = ctx.get_image_data(0.0, 0.0, canvas.width() as f64, canvas.height() as f64).unwrap().data();
    // The fatal colour (legacy, cpu store fell back to device) and the offload-skip amber appear.
    let has = |rgb: (u8, u8, u8)| data.chunks(4).any(|p| (p[0], p[1], p[2]) == rgb);
    assert!(has((0xff, 0x2e, 0x97)), "a fatal mark under A");
    assert!(has((0xff, 0xb0, 0x20)), "an offload skip under B");
    let legend = root.query_selector("[data-testid=\"timeline-legend\"]").unwrap().unwrap().text_content().unwrap();
    assert!(legend.contains("fatal block_size_mismatch on device (medium \"cpu\" fell back)"), "{legend}");
    assert!(legend.contains("skipped offload_block_size_mismatch on host_pinned"), "{legend}");
}

#[wasm_bindgen_test]
async fn the_inspector_shows_fields_bytes_and_both_rules() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_messages()).await;
    let next: web_sys::HtmlElement = root.query_selector("[data-testid=\"next-fatal\"]").unwrap().unwrap().unchecked_into();
    next.click();
    leptos::task::tick().await;
    let text = |css: &str| root.query_selector(css).unwrap().unwrap_or_else(|| panic!("no {css}")).text_content().unwrap();
    let rule_a = text("[data-testid=\"inspector-rule-a\"]");
    let rule_b = text("[data-testid=\"inspector-rule-b\"]");
    assert!(rule_a.contains("falls back to Device") && rule_a.contains("fatal block_size_mismatch"), "{rule_a}");
    assert!(rule_b.contains("12288 != 1536") && rule_b.contains("skip offload_block_size_mismatch"), "{rule_b}");
    let fields = text("[data-testid=\"inspector-fields\"]");
    assert!(fields.contains("\"cpu\"") && fields.contains("12288 tokens"), "{fields}");
    let hex = text("[data-testid=\"inspector-hex\"]");
    assert!(hex.starts_with("00000000  "), "{hex}");
}

fn hostile_batch(n: u32) -> Vec<u8> {
    kvscope_encode::raw::unknown_event_flood(n as usize)
}

#[wasm_bindgen_test]
async fn a_hostile_frame_is_classified_and_every_frame_after_it_counted() {
    // 6 million events, 12 MB: the page classifies them as they are decoded.
    const N: u32 = 6_000_000;
    let (root, fleet, _handle) = mount();
    let stream = kvscope_corpus::kimi_k3_stream(0);
    let mut messages = vec![proto::encode(&hello(1, 1536))];
    let frame = |seq: u64, payload: Vec<u8>| {
        proto::encode(&proto::Message::Frame(proto::Frame {
            source: 0,
            seq,
            recv_time_nanos: 1_000_000_000 + seq,
            replayed: false,
            topic: vec![],
            payload,
        }))
    };
    messages.push(frame(0, stream[0].payload.to_vec()));
    messages.push(frame(1, hostile_batch(N)));
    for (i, m) in stream.iter().enumerate().skip(1) {
        messages.push(frame(i as u64 + 1, m.payload.to_vec()));
    }
    feed(fleet, &messages).await;
    let c = card(&root, 0, 0);
    let frames = c.query_selector("[data-testid=\"frames\"]").unwrap().expect("a frames cell").text_content().unwrap();
    assert_eq!(frames.replace(',', ""), format!("{} frames", stream.len() + 1));
    for side in ["a", "b"] {
        assert_eq!(verdict_count(&c, side, "skipped", "ignored_event"), u64::from(N), "{side}");
    }
    assert!(verdict_count(&c, "b", "skipped", "offload_block_size_mismatch") > 0, "frames after the hostile one were classified");
    assert!(root.query_selector("[data-testid=\"crashed\"]").unwrap().is_none());
}
