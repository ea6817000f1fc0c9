//! One component per file. Each reads the part of the engine's summary it shows through
//! `use_fleet()` and re-renders when that part changed; none holds stream data.

pub mod app;
pub mod capture_bar;
pub mod data_quality;
pub mod fleet_bar;
pub mod fleet_overview;
pub mod headline;
pub mod indexer_log;
pub mod inspector;
pub mod retention;
pub mod router;
pub mod rules_help;
pub mod tier_tree;
pub mod timeline;
pub mod virtual_list;
pub mod worker_card;
pub mod worker_cards;

pub use kvscope_engine_protocol::fmt::{human_bytes, human_duration_ms, thousands};
