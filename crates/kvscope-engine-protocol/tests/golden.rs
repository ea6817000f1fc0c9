//! Golden bytes: a message of each direction, compared with committed files.
//!
//! The page and its engine worker are one build, but a browser may run a cached worker beside a
//! new page; the version prefix is what tells them apart, so a change of shape must bump it. If a
//! test here fails, the messages changed: bump `ENGINE_PROTOCOL_VERSION` in `src/message.rs`,
//! then re-bless with `KVSCOPE_BLESS=1 cargo test -p kvscope-engine-protocol --test golden` and
//! commit the new files (they also seed the `engine_messages` fuzz target).

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use kvscope_engine_protocol::completeness::{Completeness, Coverage, Shortfall};
use kvscope_engine_protocol::label::{Outcome, Reason, StorageTier, VerdictLabel};
use kvscope_engine_protocol::overview::{Anomaly, RelayCells, Row, Tally};
use kvscope_engine_protocol::view::{Bar, Card, CardRow, Cards, ConnBadge, Overview, Quality, RouterRow, Selection, Tone};
use kvscope_engine_protocol::{
    ENGINE_PROTOCOL_VERSION, EventRef, ExportKind, FromEngine, Settings, Side, Summary, ToEngine, ViewQuery, decode, encode,
};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn hex(bytes: &[u8]) -> String {
    bytes.chunks(32).map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>()).collect::<Vec<_>>().join("\n")
}

/// Compares `bytes` with `tests/golden/NAME.hex` (hex, 32 bytes a line, so diffs are readable).
fn check(name: &str, bytes: &[u8]) {
    let path = golden_dir().join(format!("{name}.hex"));
    let text = hex(bytes) + "\n";
    if std::env::var_os("KVSCOPE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
        std::fs::write(golden_dir().join("VERSION"), format!("{ENGINE_PROTOCOL_VERSION}\n")).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; bless with KVSCOPE_BLESS=1 cargo test -p kvscope-engine-protocol --test golden", path.display())
    });
    let blessed: u32 = std::fs::read_to_string(golden_dir().join("VERSION")).unwrap().trim().parse().unwrap();
    assert!(
        committed == text,
        "golden bytes of {name} changed (tests/golden/{name}.hex; blessed for version {blessed}, this is {ENGINE_PROTOCOL_VERSION}): \
         bump ENGINE_PROTOCOL_VERSION if they have not been bumped since, then re-bless \
         (KVSCOPE_BLESS=1 cargo test -p kvscope-engine-protocol --test golden)\ncommitted:\n{committed}\nnow:\n{text}"
    );
}

fn round_trip<T: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug>(name: &str, message: &T) {
    let bytes = encode(message);
    check(name, &bytes);
    assert_eq!(&decode::<T>(&bytes).unwrap(), message, "{name} decodes to what was encoded");
}

#[test]
fn the_pages_requests() {
    let settings = Settings {
        policy_a: Some("legacy".into()),
        block_size: Some(1536),
        open: vec!["13:0".into()],
        selected: Some(EventRef { source: "0:0".into(), seq: 8, index: 4 }),
        window_ms: Some((10.0, 250.0)),
        ..Settings::default()
    };
    let view = ViewQuery { settings, drill: Some(0xfeed), range: None, canvas_width: 1180.0, device_pixel_ratio: 1.0, paused: false };
    round_trip("to_engine_view", &ToEngine::View(Box::new(view)));
    round_trip("to_engine_select_at", &ToEngine::SelectAt { source: 3, side: Side::B, time_ms: 1250.5, tolerance_ms: 3.0 });
    round_trip("to_engine_export", &ToEngine::Export(ExportKind::VerdictsJsonl));
    round_trip("to_engine_ack", &ToEngine::Ack { seq: 41, page_ms: 12.25 });
}

#[test]
fn the_engines_answers() {
    let row = Row {
        index: 7,
        key: "7:0".into(),
        worker_id: "7".into(),
        dp_rank: 0,
        frames: 6,
        events: 6,
        tally: [Tally { fatal: 2, skipped: 0, filtered: 0, applied: 4 }, Tally { fatal: 0, skipped: 2, filtered: 0, applied: 4 }],
        gaps: 0,
        lost_frames: 0,
        restarts: 0,
        errors: 0,
        events_per_second: 12.5,
        wire: "map".into(),
        completeness: Coverage::Complete,
        router_sees: [Some(0.125), Some(0.125)],
        router_stale: [0, 0],
        relay: Some(RelayCells { expected: 4, received: 3, missing: 1 }),
        anomalies: vec![Anomaly::Fatal, Anomaly::PoliciesDisagree, Anomaly::RelayDiffers, Anomaly::RouterBlind, Anomaly::OffloadSkipped],
    };
    let card = Card {
        index: 7,
        key: "7:0".into(),
        worker: "7".into(),
        completeness: Completeness::Incomplete(vec![Shortfall::LostInGaps { frames: 7 }]),
        stop_lines: vec![(Side::A, " legacy: an indexer stops at seq 2".into())],
        router: RouterRow::NotMatched,
        index_lines: vec![(Side::B, "fixed: engine 16 blocks, router 2, both 2; engine only: orphan:after_cut_off 14".into())],
        tiers: vec![(StorageTier::Device, 4), (StorageTier::HostPinned, 0)],
        rows: vec![CardRow {
            kind: Outcome::Skip,
            reason: Reason::Label(VerdictLabel::OffloadBlockSizeMismatch),
            routine: false,
            cells: [(0, String::new()), (2, "host_pinned".into())],
        }],
        ..Card::default()
    };
    let summary = Summary {
        seq: 42,
        bar: Some(Bar {
            badge: ConnBadge { text: "connected".into(), tone: Tone::Ok },
            rate: "19,200 events/s".into(),
            catching_up: Some((12_000, 40_000)),
            pace: Some("views refresh every 0.4 s".into()),
            ..Bar::default()
        }),
        quality: Some(Quality { completeness: Completeness::Complete, span: Some("covers 1.3 s".into()), sources: None }),
        overview: Some(Overview { rows: vec![row] }),
        cards: Some(Cards { cards: vec![card], hint: false }),
        selection: Some(Selection { id: Some(9), event: Some(EventRef { source: "7:0".into(), seq: 2, index: 0 }) }),
        answers: vec![3],
        ..Summary::default()
    };
    round_trip("from_engine_summary", &FromEngine::Summary { summary: Box::new(summary), pixels: Some((1180, 176)) });
    round_trip("from_engine_hover", &FromEngine::Hover("7:0 at 12:00:01.250 UTC: no events".into()));
}
