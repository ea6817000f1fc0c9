//! The coordinator: the page's engine spread over K engine workers ([`crate::model::shard`]),
//! in plain Rust.
//!
//! At each flush a shard reports what it alone can say ([`ShardReport`]): its parts of the
//! headline's facts, the overview, the cards, the fleet bar, the data-quality strip and the
//! indexers' logs, its timeline's marked span and legend, and where it saw each policy's
//! indexer exit. The coordinator [`merge`]s the reports into the parts the page shows, and hands
//! every shard the fleet's exits ([`fleet_exits`], [`crate::model::Model::adopt_exit`]). The
//! timeline, the trees and the inspector take a second step: the coordinator lays the timeline
//! out for the fleet ([`timeline_layout`]: which lanes, the window), each shard paints its own
//! lanes in their bands of the canvas, the shard that reads the trees' source draws them and the
//! one that reads the selected event builds the inspector; the questions those raise of the
//! router's index go, third, to the shards that model it. [`Coordinator`] runs these rounds
//! without I/O ([`protocol`]: the messages, as bytes between workers; [`answer`]: a shard's
//! side, [`crate::engine::Engine::answer`]).
//!
//! What a report holds is what adds up across shards (counts, first events with their stream
//! positions), never display text that would have to be parsed back.

pub mod answer;
mod in_process;
pub mod protocol;
mod report;
mod rounds;

pub use in_process::InProcess;
pub use report::{FleetParts, MessageError, ShardReport, fleet_exits, merge, timeline, timeline_layout};
pub use rounds::{Coordinator, Out};
#[cfg(test)]
mod tests;
