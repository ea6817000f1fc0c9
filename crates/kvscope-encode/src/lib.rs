//! Encodes typed KV events as each vLLM and SGLang release lays them out; for tests, the demo
//! and benches only.
//!
//! What this crate is not: part of the decoding path. `kvscope-wire`, `kvscope-normalize` and
//! `kvscope-tiers` never depend on it (`crates/kvscope-corpus/tests/layering.rs` checks), so a
//! mistake here can make a test or the demo publish wrong bytes but cannot change what the
//! product reads. It is not a general msgpack library either: it writes the layouts in
//! [`release`], and [`raw`] for the odd shapes no release writes.
//!
//! - [`Batch`], [`Event`], [`Stored`], [`Removed`]: events typed as engines type them (every
//!   token id, the bytes of a bin hash, signed or unsigned ints), with chained setters.
//! - [`Layout`]: a batch shape and, per event type, the fields in order and whether each is
//!   always written; [`release::RELEASES`] holds one per release of the corpus.
//! - [`encode_batch`]: writes a batch through rmp-serde in a layout; a field the layout has no
//!   place for is an error ([`encode_batch_lossy`] drops it instead).
//! - [`router`]: Dynamo's event plane (RouterEvents, envelopes, ZMQ-plane frames), as
//!   Dynamo 1.6.1's relay writes it.
//! - [`synthetic`]: a synthetic fleet of small events, for benches.
//! - [`decoded`]: events back from `kvscope_wire`'s decode, for byte-for-byte round trips.
//!
//! ```
//! use kvscope_encode::{encode_batch, release, Batch, Hash, Removed, Stored};
//!
//! let store = Stored::new([Hash::U64(7)], 16).tokens(1..=16).medium(Some("GPU")).group_idx(Some(0));
//! let batch = Batch { ts: 1.0, events: vec![store.into(), Removed::new([Hash::U64(7)]).into()], dp_rank: Some(0) };
//! let bytes = encode_batch(&release::VLLM_0_23.layout, &batch).unwrap();
//! let decoded = kvscope_wire::decode_batch(&bytes).unwrap();
//! assert_eq!(decoded.events.len(), 2);
//! // vLLM 0.9.0's BlockStored has no medium:
//! let old = release::named("vllm-0.9.1").unwrap();
//! assert!(encode_batch(&old.layout, &batch).is_err());
//! ```

mod builder;
pub mod decoded;
mod error;
mod event;
pub mod layout;
pub mod raw;
pub mod release;
pub mod router;
mod slot;
pub mod synthetic;
mod write;

pub use error::EncodeError;
pub use event::{Batch, BlockKeys, Event, Hash, Other, Removed, Stored, Tokens};
pub use layout::{BatchForm, EventForm, Field, Layout, MapHeader, Presence};
pub use write::{encode_batch, encode_batch_lossy};
