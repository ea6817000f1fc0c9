//! How a batch and its events are laid out: data, one value per release (see [`crate::release`]).
//!
//! msgspec decides the bytes from the struct definition alone: `array_like` structs (vLLM up
//! to 0.23) write every field by position, nil when unset; tagged structs with
//! `omit_defaults` (vLLM 0.24 on, SGLang) write a `type` key first, then each field in
//! declaration order unless it equals its default. So a layout is a list of fields per event
//! type, each with whether it is always written, and nothing else to decide.

/// A field of `BlockStored` or `BlockRemoved` (or `ownership` of other events).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Hashes,
    Parent,
    Tokens,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
    /// Array position 7 as SGLang's array form uses it: `lora_name`, or `{"cache_salt": ..}`.
    LoraNameOrSalt,
    ExtraKeys,
    CacheSalt,
    GroupIdx,
    Kind,
    SlidingWindow,
    Locality,
    SessionId,
    Ownership,
}

impl Field {
    /// The map key (and the name in errors).
    pub fn key(self) -> &'static str {
        match self {
            Field::Hashes => "block_hashes",
            Field::Parent => "parent_block_hash",
            Field::Tokens => "token_ids",
            Field::BlockSize => "block_size",
            Field::LoraId => "lora_id",
            Field::Medium => "medium",
            Field::LoraName | Field::LoraNameOrSalt => "lora_name",
            Field::ExtraKeys => "extra_keys",
            Field::CacheSalt => "cache_salt",
            Field::GroupIdx => "group_idx",
            Field::Kind => "kv_cache_spec_kind",
            Field::SlidingWindow => "kv_cache_spec_sliding_window",
            Field::Locality => "locality",
            Field::SessionId => "session_id",
            Field::Ownership => "ownership",
        }
    }
}

/// Whether a map field is written when unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    /// No default in the struct: written, nil when unset.
    Always,
    /// Defaults to `None`: left out when unset (`omit_defaults`).
    IfSet,
}

/// How wide a map header is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapHeader {
    /// The shortest form for the number of keys written.
    Shortest,
    /// Always `map16`: msgspec sizes the header by the struct's field count (16 or more in
    /// vLLM 0.33's `BlockStored`) before leaving defaults out, then patches the count in.
    Map16,
}

/// The batch's outer shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchForm {
    /// `[ts, events]` (2, vLLM 0.9.0), `[ts, events, dp_rank]` (3), or longer with nils after
    /// the rank (no release; for consumers that read exactly 3).
    Array { len: u32 },
    /// `{ts, events, data_parallel_rank}` (no release; the decoder accepts it).
    Map,
}

/// How events are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventForm {
    /// `[tag, field...]`: every listed field, nil when unset; other events are `[tag]`.
    Array { stored: &'static [Field], removed: &'static [Field] },
    /// `{type: tag, field: value...}` in the listed order.
    Map {
        stored: &'static [(Field, Presence)],
        removed: &'static [(Field, Presence)],
        /// Fields of `AllBlocksCleared` and unknown tags.
        other: &'static [(Field, Presence)],
        stored_header: MapHeader,
    },
}

/// A batch layout: what [`crate::encode_batch`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// For errors: the release (`vllm-0.23.0`) or test layout it is.
    pub name: &'static str,
    pub batch: BatchForm,
    pub events: EventForm,
}

impl Layout {
    /// The same events in another batch shape.
    pub const fn with_batch(self, batch: BatchForm) -> Layout {
        Layout { batch, ..self }
    }

    /// True when events are tagged arrays.
    pub fn is_array(&self) -> bool {
        matches!(self.events, EventForm::Array { .. })
    }
}
