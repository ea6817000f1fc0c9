//! The messages themselves, and their bytes: msgpack (positional, both ends are one build) behind
//! a version number, so that a page and an engine worker from different builds (a cached
//! worker script) say so instead of misreading each other.

use serde::{Deserialize, Serialize};

use crate::settings::{Settings, Side};
use crate::severity::Severity;
use crate::view::Summary;

/// Bumped whenever a message or a view struct changes shape.
pub const ENGINE_PROTOCOL_VERSION: u32 = 8;

/// Where Trunk puts the engine worker's loader (workers keep their names): the page starts it
/// there, and the page's engine worker starts the other engine workers from the same script.
pub const ENGINE_WORKER_URL: &str = "./kvscope-engine_loader.js";

/// The name the page gives its engine worker: how many engine workers to run (the worker
/// reads it before any message, [`engines_of_worker_name`]).
pub fn engine_worker_name(engines: u32) -> String {
    format!("kvscope-engine engines={engines}")
}

/// The engine workers a worker name asks for (1 for a name that says none).
pub fn engines_of_worker_name(name: &str) -> u32 {
    name.strip_prefix("kvscope-engine engines=").and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(1)
}

/// What the page shows and asks about: the engine summarises the model for this.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct ViewQuery {
    pub settings: Settings,
    /// The tier tree's drill-down root.
    pub drill: Option<u64>,
    /// A shift-drag's time range on the timeline, ms since the first frame.
    pub range: Option<(f64, f64)>,
    /// The timeline canvas's width in CSS pixels, and the device pixel ratio.
    pub canvas_width: f64,
    pub device_pixel_ratio: f64,
    /// Views frozen: the engine goes on ingesting and sends nothing until resumed.
    pub paused: bool,
}

/// What the page can download.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExportKind {
    /// The retained frames as a `.kvcap` capture.
    Capture,
    /// Every retained event's verdicts as JSON lines.
    VerdictsJsonl,
}

/// The page to the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToEngine {
    /// What the page shows now; sent whenever it changed.
    View(Box<ViewQuery>),
    /// Open the kvscope server's WebSocket at this URL (and keep it open, with backoff).
    Connect { url: String },
    /// One WebSocket message as the server would send it (the component tests feed these).
    #[cfg(feature = "test-hooks")]
    Ingest(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Open the capture file that rides beside this message (a `File`), closing the socket.
    OpenCapture { name: String },
    /// Show this event in the inspector (`None` closes it).
    Select(Option<u64>),
    /// Select the next event marked under either policy with at least this severity, after the
    /// selected one, wrapping around.
    SelectNext { min_severity: Severity },
    /// Select the marked event nearest `time_ms` on a lane, within `tolerance_ms`.
    SelectAt { source: u32, side: Side, time_ms: f64, tolerance_ms: f64 },
    /// What a lane holds between two times, in words: answered by [`FromEngine::Hover`].
    Hover { source: u32, side: Side, from_ms: f64, to_ms: f64 },
    /// Fetch event `id`'s raw bytes again (from the server's history or the opened capture).
    FetchBytes(u64),
    /// Build a download: answered by [`FromEngine::Download`].
    Export(ExportKind),
    /// The page applied summary `seq`: the engine may send the next. `page_ms` is what taking
    /// it cost the page's main thread (its animation frames, from each one's start to the end
    /// of its rendering): the engine paces its summaries by it (`kvscope_engine::pace`).
    Ack { seq: u64, page_ms: f64 },
    /// Summarise now, and list `id` in the summary's `answers` (tests wait on it).
    #[cfg(feature = "test-hooks")]
    Sync { id: u64 },
}

/// The engine to the page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromEngine {
    /// The engine runs and takes messages; anything the page sent before this was lost.
    Ready { version: u32 },
    /// What changed since the last summary. The timeline's pixels, when they changed, ride
    /// beside it (an `ArrayBuffer` of `width` x `height` RGBA device pixels).
    Summary { summary: Box<Summary>, pixels: Option<(u32, u32)> },
    /// The answer to [`ToEngine::Hover`].
    Hover(String),
    /// A download, ready.
    Download {
        name: String,
        mime: String,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// The engine panicked: the page must stop looking live.
    Crashed(String),
}

/// Bytes that are not a message of this build.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} bytes are too short for an engine message (at least 4)")]
    Short(usize),
    #[error(
        "the engine worker speaks protocol {theirs} and the page {ours}: one of them comes from an older build \
         (a cached script); reload the page"
    )]
    Version { theirs: u32, ours: u32 },
    #[error("an engine message that does not decode: {0}")]
    Body(#[from] rmp_serde::decode::Error),
}

/// The version, big-endian, then the message.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut out = ENGINE_PROTOCOL_VERSION.to_be_bytes().to_vec();
    // Every message is plain data: serializing it into a Vec cannot fail.
    let _ = rmp_serde::encode::write(&mut out, message);
    out
}

/// The message in `bytes`, checked against this build's version.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, DecodeError> {
    let (head, body) = bytes.split_first_chunk::<4>().ok_or(DecodeError::Short(bytes.len()))?;
    let theirs = u32::from_be_bytes(*head);
    if theirs != ENGINE_PROTOCOL_VERSION {
        return Err(DecodeError::Version { theirs, ours: ENGINE_PROTOCOL_VERSION });
    }
    Ok(rmp_serde::from_slice(body)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Bar, ConnBadge, Meta, Tone};

    #[test]
    fn messages_round_trip_and_a_foreign_version_is_named() {
        let view = ToEngine::View(Box::new(ViewQuery {
            settings: Settings { block_size: Some(1536), open: vec!["0:0".into()], ..Settings::default() },
            drill: Some(7),
            range: Some((1.0, 2.0)),
            canvas_width: 1200.0,
            device_pixel_ratio: 2.0,
            paused: false,
        }));
        assert_eq!(decode::<ToEngine>(&encode(&view)).unwrap(), view);
        let summary = FromEngine::Summary {
            summary: Box::new(Summary {
                seq: 3,
                meta: Some(Meta { block_size: 16, ..Meta::default() }),
                bar: Some(Bar {
                    badge: ConnBadge { text: "connected".into(), tone: Tone::Ok },
                    rate: "12 events/s".into(),
                    ..Bar::default()
                }),
                answers: vec![9],
                ..Summary::default()
            }),
            pixels: Some((10, 4)),
        };
        assert_eq!(decode::<FromEngine>(&encode(&summary)).unwrap(), summary);
        let mut old = encode(&ToEngine::Ack { seq: 1, page_ms: 2.5 });
        old[3] = 0;
        let e = decode::<ToEngine>(&old).unwrap_err().to_string();
        assert!(e.starts_with(&format!("the engine worker speaks protocol 0 and the page {ENGINE_PROTOCOL_VERSION}")), "{e}");
        assert!(decode::<ToEngine>(&[0, 0]).unwrap_err().to_string().contains("too short"));
    }
}
