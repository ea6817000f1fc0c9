//! What the coordinator and the shards say to each other. Each engine worker has its own wasm
//! memory, so the messages cross as msgpack bytes ([`encode`], [`decode`]); a shard in the
//! coordinator's own worker is handed the same messages without the bytes.

use kvscope_engine_protocol::view::Inspector;
use kvscope_engine_protocol::{EventRef, Severity, Side, ViewQuery};
use serde::{Deserialize, Serialize};

use super::ShardReport;
use crate::model::{IndexerExit, StreamOrder};
use crate::summarize::timeline::{LanesPart, Layout};
use crate::summarize::trees::{LacksQuery, SearchHit, TreePart};
use crate::summarize::{IndexQuery, InspectorPart};

/// The coordinator to a shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToShard {
    /// What the page shows now: its settings decide each shard's classification.
    View(Box<ViewQuery>),
    /// Report for a flush ([`FromShard::Report`]), or say nothing changed since the last
    /// (unless `force`); and find the event a shared link names.
    Report { find: Option<EventRef>, force: bool },
    /// Paint your lanes of the layout, draw the trees if you read the shown source, build the
    /// inspector if the selected event is yours, and list your hits of the searched hash.
    Paint { layout: Box<Layout>, selected: Option<u64> },
    /// The index's questions: answer those about an index you model.
    Ask { lacks: Option<LacksQuery>, index: Option<IndexQuery> },
    /// The fleet's indexer exits (the earliest any shard saw): adopt them.
    AdoptExits(Box<[Option<IndexerExit>; 2]>),
    /// What your lane of `source` holds between two times, in words.
    Hover { source: u32, side: Side, from_ms: f64, to_ms: f64 },
    /// The marked event a click on your lane of `source` opens.
    Pick { source: u32, side: Side, time_ms: f64, tolerance_ms: f64 },
    /// Your first event after `after` in the stream, and your first of all, marked under either
    /// policy with at least `min_severity`.
    NextMarked { after: Option<StreamOrder>, min_severity: Severity },
}

/// A shard to the coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromShard {
    Report(Box<ShardReport>),
    /// Nothing changed since the last report.
    Unchanged,
    Painted(Box<Painted>),
    Answered(Answers),
    Hover(String),
    Picked(Option<u64>),
    Next {
        after: Option<(StreamOrder, u64)>,
        first: Option<(StreamOrder, u64)>,
    },
}

/// A shard's part of the timeline, the trees and the inspector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Painted {
    pub lanes: LanesPart,
    /// The trees shown, if this shard reads their source.
    pub tree: Option<TreePart>,
    /// The inspector, if the selected event is this shard's.
    pub inspector: Option<InspectorPart>,
    /// The selected event by name and where it sits, if it is this shard's.
    pub selected: Option<(EventRef, Option<StreamOrder>)>,
    pub hits: Vec<SearchHit>,
}

/// A shard's answers to the index's questions (none unless it models that index).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Answers {
    pub lacks: Vec<(u64, String)>,
    pub index_lines: Vec<(Side, String)>,
}

impl Painted {
    /// The inspector with every shard's index lines.
    pub fn inspector_with(&self, lines: Vec<(Side, String)>) -> Option<Inspector> {
        self.inspector.clone().map(|part| part.with_index_lines(lines))
    }
}

/// A message's bytes between workers.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Every message serializes (the round-trip tests); were one not to, the empty bytes fail
    // to decode on the other side, which says so.
    rmp_serde::to_vec_named(message).unwrap_or_default()
}

/// A message from another worker's bytes.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, super::MessageError> {
    rmp_serde::from_slice(bytes).map_err(|e| super::MessageError(e.to_string()))
}

/// Everything the coordinator's worker sends a shard's worker: the rounds' messages, and what
/// feeds its model (the server's messages as they arrive, a capture to open, a fetch to make).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToShardWorker {
    /// Which shard to be: first, before anything else.
    Start {
        index: u32,
        count: u32,
    },
    Round(ToShard),
    /// One server message, in the order the coordinator received it.
    Server(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The server's WebSocket URL: its `/frame` answers a fetch of an event's bytes.
    ServerUrl(String),
    /// Open the capture file that rides beside this message.
    OpenCapture {
        name: String,
    },
    /// Fetch event `id`'s raw bytes again (the page's inspector asked).
    FetchBytes(u64),
    /// Your part of a download ([`FromShardWorker::Exported`]).
    Export(kvscope_engine_protocol::ExportKind),
}

/// Everything a shard's worker sends the coordinator's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromShardWorker {
    /// The worker runs and takes messages.
    Ready,
    Round(FromShard),
    /// Its model changed since it last reported (it applied messages, a capture went on, a
    /// fetch came back): the coordinator flushes.
    Changed,
    /// Its part of a download.
    Exported(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Its engine panicked: the page must stop looking live.
    Crashed(String),
}
