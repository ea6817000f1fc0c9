//! Component tests in headless Chromium
//! (`wasm-pack test --headless --chrome web --release --features test-hooks`): the dashboard is
//! mounted on a fresh element, fed protocol messages built from the corpus's Kimi-K3 incident
//! streams, and read back through the same `data-testid` hooks the end-to-end
//! tests and people's scripts use. The expected numbers come from running the normalizer
//! directly over the same bytes.

// Test code (wasm_bindgen_test, which clippy does not count as #[test]): a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;

use kvscope_engine::local::LocalEngine;
use kvscope_engine_protocol::Settings;
use kvscope_normalize::{Normalizer, Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_protocol as proto;
use kvscope_web::contexts::{EngineLink, Fleet, provide_fleet};
use kvscope_web::views::app::Dashboard;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

thread_local! {
    static FLEET: RefCell<Option<Fleet>> = const { RefCell::new(None) };
    static ROOT: RefCell<Option<web_sys::HtmlElement>> = const { RefCell::new(None) };
}

/// The engine on this thread, behind the same bytes as the worker's.
struct Local(LocalEngine);

impl EngineLink for Local {
    fn send(&self, bytes: Vec<u8>, extra: wasm_bindgen::JsValue) {
        self.0.send(&bytes, extra);
    }
}

/// Mounts the dashboard (no socket) on a fresh element, with its engine; returns the element
/// and the fleet.
fn mount() -> (web_sys::HtmlElement, Fleet, leptos::mount::UnmountHandle<impl leptos::tachys::view::Mountable>) {
    mount_with(Settings { offline: true, ..Settings::default() })
}

fn mount_with(settings: Settings) -> (web_sys::HtmlElement, Fleet, leptos::mount::UnmountHandle<impl leptos::tachys::view::Mountable>) {
    let document = web_sys::window().unwrap().document().unwrap();
    let el: web_sys::HtmlElement = document.create_element("div").unwrap().unchecked_into();
    document.body().unwrap().append_child(&el).unwrap();
    let handle = leptos::mount::mount_to(el.clone(), || {
        let fleet = provide_fleet(settings);
        let engine = LocalEngine::start(move |bytes, extra| fleet.receive(&bytes, extra));
        fleet.attach(Rc::new(Local(engine)));
        FLEET.with(|f| *f.borrow_mut() = Some(fleet));
        view! { <Dashboard /> }
    });
    let fleet = FLEET.with(|f| f.borrow().expect("mounted"));
    ROOT.with(|r| *r.borrow_mut() = Some(el.clone()));
    (el, fleet, handle)
}

async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms).unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
}

/// Waits until the dashboard's last stage is mounted: `views::app` mounts its views in stages,
/// one task each, after the browser painted the one before.
async fn mounted() {
    let root = ROOT.with(|r| r.borrow().clone()).expect("mounted");
    for _ in 0..300 {
        if root.query_selector("[data-testid=\"tier-tree\"]").unwrap().is_some() {
            return;
        }
        sleep_ms(10).await;
    }
    panic!("the dashboard's later stages did not mount within 3 s");
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
                block_size: None,
            })
            .collect(),
        defaults: proto::Defaults {
            block_size,
            policy_a: "legacy".into(),
            policy_b: "fixed".into(),
            relay_policy: "dynamo-1.6.1".into(),
            index_max_nodes: None,
        },
        history_bytes: 0,
        client_queue_bytes: 0,
        started_unix_nanos: 0,
        discovery: Vec::new(),
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

/// Feeds messages to the engine as its socket would, then waits until the page shows them.
async fn feed(fleet: Fleet, messages: &[Vec<u8>]) {
    mounted().await;
    for m in messages {
        fleet.ingest(m);
    }
    settled(fleet).await;
}

/// Waits until the page shows everything asked of the engine so far.
async fn settled(fleet: Fleet) {
    fleet.sync(30_000).await.unwrap();
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
    let canvas: web_sys::HtmlCanvasElement = root.query_selector("[data-testid=\"timeline\"] canvas").unwrap().unwrap().unchecked_into();
    assert!(canvas.width() > 0 && canvas.height() > 0);
    let ctx: web_sys::CanvasRenderingContext2d = canvas.get_context("2d").unwrap().unwrap().unchecked_into();
    let data = ctx.get_image_data(0.0, 0.0, canvas.width() as f64, canvas.height() as f64).unwrap().data();
    // The fatal colour (legacy's exit marker and its first fatal mark) and the offload-skip
    // orange appear, in the page's one palette.
    let rgb = |hex: &str| {
        let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap();
        ((v >> 16) as u8, (v >> 8) as u8, v as u8)
    };
    let has = |c: (u8, u8, u8)| data.chunks(4).any(|p| (p[0], p[1], p[2]) == c);
    assert!(has(rgb(kvscope_engine::model::classes::FATAL)), "a fatal mark under A");
    assert!(has(rgb(kvscope_engine::model::classes::OFFLOAD_SKIP)), "an offload skip under B");
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
    settled(fleet).await;
    let text = |css: &str| root.query_selector(css).unwrap().unwrap_or_else(|| panic!("no {css}")).text_content().unwrap();
    let rule_a = text("[data-testid=\"inspector-rule-a\"]");
    let rule_b = text("[data-testid=\"inspector-rule-b\"]");
    assert!(rule_a.contains("falls back to Device") && rule_a.contains("fatal block_size_mismatch"), "{rule_a}");
    assert!(rule_b.contains("12288 != 1536") && rule_b.contains("skip offload_block_size_mismatch"), "{rule_b}");
    let fields = text("[data-testid=\"inspector-fields\"]");
    assert!(fields.contains("\"cpu\"") && fields.contains("12288 tokens"), "{fields}");
    let hex = text("[data-testid=\"inspector-hex\"] pre");
    assert!(hex.starts_with("00000000  "), "{hex}");
    assert!(text("[data-testid=\"inspector-hex\"] .hex-pager").contains("page 1 of "));
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

/// A capture file whose bytes go bad part-way, opened as the page opens one (its slices read
/// and classified as they arrive): the records before the corrupt one are shown, even when none
/// had yet told the block size, and the capture bar says what was wrong and where.
#[wasm_bindgen_test]
async fn a_corrupt_capture_shows_the_records_before_it_and_says_where() {
    let (root, fleet, _handle) = mount();
    mounted().await;
    let proto::Message::Hello(hello) = hello(1, 1536) else { unreachable!("hello() makes a hello") };
    let header =
        proto::capture::CaptureHeader { created_unix_nanos: 0, kvscope_version: "test".into(), sources: hello.sources, note: None };
    let mut bytes = Vec::new();
    proto::capture::write_header(&mut bytes, &header).unwrap();
    // Batches of unknown events: classified, but none has a Device-tier store.
    let good = 5u64;
    for seq in 0..good {
        bytes.extend(proto::capture::encode_record_parts(
            0,
            1_000 + seq,
            false,
            &[b"kv".as_slice(), &seq.to_be_bytes(), &hostile_batch(10)],
        ));
    }
    let bad_at = bytes.len();
    // A whole record of 3 bytes that are not msgpack (0xc1 is never used).
    bytes.extend([0, 0, 0, 3, 0xc1, 0xc1, 0xc1]);
    let text = capture_error(&root, fleet, "bad.kvcap", &bytes).await;
    assert!(text.starts_with("bad.kvcap: ") && text.contains(&format!("byte {bad_at}")), "{text}");
    assert!(text.contains(&format!("({good} records before it are shown)")), "{text}");
    settled(fleet).await;
    let frames = card(&root, 0, 0).query_selector("[data-testid=\"frames\"]").unwrap().expect("a frames cell").text_content().unwrap();
    assert_eq!(frames, format!("{good} frames"));

    // A file that is not a capture at all: what it is not, and no records to speak of.
    let text = capture_error(&root, fleet, "notes.txt", b"some notes, not a capture").await;
    assert!(text.starts_with("notes.txt: not a kvscope capture"), "{text}");
    assert!(!text.contains("records"), "{text}");
}

/// Opens `bytes` as a capture file named `name` and returns the capture bar's error.
async fn capture_error(root: &web_sys::HtmlElement, fleet: Fleet, name: &str, bytes: &[u8]) -> String {
    let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes));
    fleet.open_capture(web_sys::File::new_with_u8_array_sequence(&parts, name).unwrap());
    for _ in 0..500 {
        let error = root.query_selector("[data-testid=\"capture-error\"]").unwrap();
        if let Some(text) = error.and_then(|e| e.text_content()).filter(|t| t.starts_with(name)) {
            return text;
        }
        sleep_ms(10).await;
    }
    panic!("no error on the capture bar for {name} within 5 s");
}

// --- Completeness: never an all-clear over missing data -------------------------------------

/// The headline's policy boxes and the data-quality strip: (completeness, all-clear) of each.
fn truth(root: &web_sys::HtmlElement) -> (String, [(String, String); 2]) {
    let attr = |el: &web_sys::Element, a: &str| el.get_attribute(a).unwrap_or_else(|| panic!("no {a} on {}", el.outer_html()));
    let strip = root.query_selector("[data-testid=\"data-quality\"]").unwrap().expect("a data-quality strip");
    let side = |s: &str| {
        let el = root.query_selector(&format!("[data-testid=\"summary-{s}\"]")).unwrap().expect("a policy box");
        (attr(&el, "data-completeness"), attr(&el, "data-allclear"))
    };
    (attr(&strip, "data-completeness"), [side("a"), side("b")])
}

fn shortfalls(root: &web_sys::HtmlElement) -> Vec<String> {
    q(root, "[data-testid=\"data-quality\"] [data-shortfall]").iter().filter_map(|e| e.get_attribute("data-shortfall")).collect()
}

/// No element on the page reads as an all-clear, and the strip names `shortfall`.
fn assert_no_all_clear(root: &web_sys::HtmlElement, completeness: &str, shortfall: &str) {
    let (strip, sides) = truth(root);
    assert_eq!(strip, completeness);
    for (c, clear) in &sides {
        assert_eq!(c, completeness);
        assert_eq!(clear, "false", "a policy box reads as an all-clear over {completeness} data");
    }
    assert!(q(root, ".policy-summary.good").is_empty());
    assert!(shortfalls(root).iter().any(|s| s == shortfall), "{:?}", shortfalls(root));
    for line in q(root, "[data-testid=\"verdict-line\"]") {
        let text = line.text_content().unwrap_or_default();
        let want = if completeness == "unknown" { "Unknown" } else { "Incomplete data" };
        assert!(text.starts_with(want), "{text}");
    }
}

/// The incident's frames with `f` applied to each (worker, message index) first; `None` drops it.
fn kimi_edited(f: impl Fn(u32, usize, proto::Frame) -> Option<proto::Frame>) -> Vec<Vec<u8>> {
    let mut out = vec![proto::encode(&hello(3, 1536))];
    for w in 0..3u32 {
        for (i, m) in kvscope_corpus::kimi_k3_stream(w).into_iter().enumerate() {
            let frame = proto::Frame {
                source: w,
                seq: m.seq,
                recv_time_nanos: 1_000_000_000 + i as u64 * 20_000_000 + u64::from(w),
                replayed: false,
                topic: m.topic.as_bytes().to_vec(),
                payload: m.payload.to_vec(),
            };
            if let Some(frame) = f(w, i, frame) {
                out.push(proto::encode(&proto::Message::Frame(frame)));
            }
        }
    }
    out
}

#[wasm_bindgen_test]
async fn the_whole_incident_is_complete_and_only_b_reads_as_clear() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_messages()).await;
    let (strip, [a, b]) = truth(&root);
    assert_eq!(strip, "complete");
    assert_eq!(a, ("complete".to_owned(), "false".to_owned()), "legacy exits: never clear");
    assert_eq!(b, ("complete".to_owned(), "true".to_owned()));
    assert!(q(&root, "[data-testid=\"open-exit-a\"]").len() == 1);
}

#[wasm_bindgen_test]
async fn zero_events_is_unknown() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &[proto::encode(&hello(3, 1536))]).await;
    assert_no_all_clear(&root, "unknown", "unknown");
}

#[wasm_bindgen_test]
async fn a_seq_gap_is_incomplete() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_edited(|w, i, f| (!(w == 1 && (5..9).contains(&i))).then_some(f))).await;
    assert_no_all_clear(&root, "incomplete", "gaps");
    let card = card(&root, 1, 0);
    assert_eq!(card.get_attribute("data-completeness").as_deref(), Some("incomplete"));
    assert!(card.query_selector("[data-testid=\"completeness\"]").unwrap().is_some());
    assert_eq!(self::card(&root, 0, 0).get_attribute("data-completeness").as_deref(), Some("complete"));
}

#[wasm_bindgen_test]
async fn a_lag_notice_is_incomplete() {
    let (root, fleet, _handle) = mount();
    let mut messages = kimi_messages();
    messages.push(proto::encode(&proto::Message::LagNotice(proto::LagNotice {
        frames_lost: 12,
        messages_lost: 12,
        bytes_lost: 4096,
        sources: vec![proto::SourceLoss { source: 2, frames: 12, first_seq: 3, last_seq: 14 }],
        queue_bytes: 1 << 20,
        flag: "--client-queue-bytes".into(),
    })));
    feed(fleet, &messages).await;
    assert_no_all_clear(&root, "incomplete", "lag");
}

/// Joining late is not a hole: history the server evicted before the page joined leaves the
/// strip complete, and the time range says where the window starts.
#[wasm_bindgen_test]
async fn joining_late_is_not_a_hole_and_the_time_range_says_where_the_window_starts() {
    let (root, fleet, _handle) = mount();
    let mut messages = kimi_messages();
    messages.push(proto::encode(&proto::Message::HistoryComplete(proto::HistoryComplete {
        frames: 100,
        evicted_frames: 5_000,
        bytes: 1 << 20,
    })));
    feed(fleet, &messages).await;
    let (strip, _) = truth(&root);
    assert_eq!(strip, "complete");
    assert_eq!(shortfalls(&root), ["complete"], "no shortfall");
    let span = q(&root, "[data-testid=\"time-span\"]").first().and_then(|e| e.text_content()).unwrap_or_default();
    assert!(span.contains("the window starts there, 5,000 earlier frames had left the server's history before this page joined"), "{span}");
}

#[wasm_bindgen_test]
async fn a_decode_error_is_incomplete() {
    let (root, fleet, _handle) = mount();
    feed(
        fleet,
        &kimi_edited(|w, i, mut f| {
            if w == 0 && i == 3 {
                f.payload = vec![0x93, 0xc1];
            }
            Some(f)
        }),
    )
    .await;
    assert_no_all_clear(&root, "incomplete", "errors");
}

#[wasm_bindgen_test]
async fn the_headline_names_the_exit_and_the_crashloop() {
    let (root, fleet, _handle) = mount();
    feed(fleet, &kimi_messages()).await;
    let line = q(&root, "[data-testid=\"summary-a\"] [data-testid=\"verdict-line\"]")[0].text_content().unwrap();
    assert!(line.starts_with("legacy: the router's indexer EXITS at "), "{line}");
    assert!(line.contains(" UTC) on block_size_mismatch"), "{line}");
    let details = q(&root, "[data-testid=\"summary-a\"] li").iter().map(|l| l.text_content().unwrap()).collect::<Vec<_>>().join("\n");
    let fatal: u64 = (0..3).map(|w| reference(w, "legacy").fatal_count).sum();
    assert!(details.contains(&format!("crashloop: {} later events", kvscope_web::views::thousands(fatal - 1))), "{details}");
    // The first fatal opens in the inspector by itself.
    settled(fleet).await;
    let inspector = root.query_selector("[data-testid=\"inspector\"]").unwrap().expect("an inspector");
    assert!(
        inspector.text_content().unwrap_or_default().contains("block_size_mismatch"),
        "{}",
        inspector.text_content().unwrap_or_default()
    );
}

/// While the server's history arrives, the fleet bar says how far the page has caught up, from
/// the count `HistoryStart` announced; it is gone once `HistoryComplete` ends the history. The
/// overview counts every frame.
#[wasm_bindgen_test]
async fn catching_up_shows_how_much_of_the_history_arrived() {
    let (root, fleet, _handle) = mount();
    let messages = kimi_messages();
    let history = messages.len() as u64 - 1;
    let start = proto::encode(&proto::Message::HistoryStart(proto::HistoryStart { frames: history, bytes: 1 }));
    feed(fleet, &[messages[0].clone(), start]).await;
    feed(fleet, &messages[1..31]).await;
    let bar = root.query_selector("[data-testid=\"catching-up\"]").unwrap().unwrap_or_else(|| {
        let header = root.query_selector("header").unwrap().map(|h| h.inner_html()).unwrap_or_default();
        panic!("no catching-up note in the fleet bar: {header}")
    });
    assert_eq!(bar.get_attribute("data-done").as_deref(), Some("30"));
    assert_eq!(bar.get_attribute("data-total"), Some(history.to_string()));
    assert!(bar.text_content().unwrap_or_default().starts_with("catching up: 30 of "), "{:?}", bar.text_content());
    feed(fleet, &messages[31..]).await;
    let end = proto::encode(&proto::Message::HistoryComplete(proto::HistoryComplete { frames: history, evicted_frames: 0, bytes: 1 }));
    feed(fleet, &[end]).await;
    assert!(root.query_selector("[data-testid=\"catching-up\"]").unwrap().is_none(), "live: no catching-up note");
    let frames = root.query_selector("[data-testid=\"fleet-frames\"]").unwrap().expect("fleet-frames");
    assert_eq!(frames.text_content(), Some(history.to_string()));
    assert_eq!(q(&root, "[data-testid=\"source-row\"]").len(), 3);
}

/// Past the event bound, the retention line says so in full, in the warning colour: which bound,
/// how many events it let go, and the setting that raises it (the fleet bar cut this sentence
/// to its first figure).
#[wasm_bindgen_test]
async fn the_retention_line_says_which_bound_was_reached_and_how_to_raise_it() {
    let (root, fleet, _handle) = mount_with(Settings { offline: true, retain_events: Some(100), ..Settings::default() });
    feed(fleet, &kimi_messages()).await;
    settled(fleet).await;
    let line = root.query_selector("[data-testid=\"retention\"]").unwrap().expect("a retention line");
    let text = line.text_content().unwrap_or_default();
    assert!(text.starts_with("Kept: "), "{text}");
    assert!(text.contains(" of 100 events kept"), "{text}");
    assert!(text.contains("event bound reached: the ") && text.contains(" oldest events are gone (raise with ?events=N)"), "{text}");
    assert!(line.class_list().contains("bound"), "the line is drawn as a warning");
    let memory = root.query_selector("[data-testid=\"memory\"]").unwrap().expect("the memory figures");
    assert!(memory.get_attribute("data-engine-wasm-bytes").is_some_and(|b| b.parse::<u64>().is_ok_and(|b| b > 0)));
    assert!(root.query_selector("header [data-testid=\"memory\"]").unwrap().is_none(), "not in the one-line fleet bar");
}
