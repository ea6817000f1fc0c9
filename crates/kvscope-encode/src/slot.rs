//! One field of one event, ready to serialize: the bridge between [`Field`] and the event
//! structs, so the writer never matches on field names.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::event::{BlockKeys, Hash, Other, Removed, Stored, Tokens};
use crate::layout::Field;

/// A field's value, borrowed from an event.
#[derive(Debug)]
pub(crate) enum Slot<'a> {
    Hashes(&'a [Hash]),
    Hash(Option<&'a Hash>),
    Tokens(&'a Tokens),
    U32(Option<u32>),
    I64(Option<i64>),
    Str(Option<&'a str>),
    ExtraKeys(Option<&'a [BlockKeys]>),
    /// SGLang's `{"cache_salt": salt}` at array position 7.
    SaltMap(&'a str),
    /// The event type has no such field.
    Missing,
}

impl Slot<'_> {
    /// False when the value is nil (or the event has no such field).
    pub(crate) fn is_set(&self) -> bool {
        match self {
            Slot::Hashes(_) | Slot::Tokens(_) | Slot::SaltMap(_) => true,
            Slot::Hash(v) => v.is_some(),
            Slot::U32(v) => v.is_some(),
            Slot::I64(v) => v.is_some(),
            Slot::Str(v) => v.is_some(),
            Slot::ExtraKeys(v) => v.is_some(),
            Slot::Missing => false,
        }
    }
}

impl Serialize for Slot<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Slot::Hashes(v) => v.serialize(s),
            Slot::Hash(v) => v.serialize(s),
            Slot::Tokens(v) => v.serialize(s),
            Slot::U32(v) => v.serialize(s),
            Slot::I64(v) => v.serialize(s),
            Slot::Str(v) => v.serialize(s),
            Slot::ExtraKeys(v) => v.serialize(s),
            Slot::SaltMap(salt) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("cache_salt", salt)?;
                m.end()
            }
            Slot::Missing => s.serialize_none(),
        }
    }
}

/// The fields each event type can carry, for the "nothing set that the layout cannot hold" check.
pub(crate) const STORED_FIELDS: &[Field] = &[
    Field::Parent,
    Field::BlockSize,
    Field::LoraId,
    Field::Medium,
    Field::LoraName,
    Field::ExtraKeys,
    Field::CacheSalt,
    Field::GroupIdx,
    Field::Kind,
    Field::SlidingWindow,
    Field::Locality,
    Field::SessionId,
    Field::Ownership,
];
pub(crate) const REMOVED_FIELDS: &[Field] =
    &[Field::Medium, Field::GroupIdx, Field::Kind, Field::SlidingWindow, Field::Locality, Field::Ownership];
pub(crate) const OTHER_FIELDS: &[Field] = &[Field::Ownership];

/// Where in a layout's field list a field is written (position 7 holds two of them).
pub(crate) fn covers(listed: Field, field: Field) -> bool {
    listed == field || (listed == Field::LoraNameOrSalt && matches!(field, Field::LoraName | Field::CacheSalt))
}

pub(crate) fn stored(e: &Stored, f: Field) -> Slot<'_> {
    match f {
        Field::Hashes => Slot::Hashes(&e.hashes),
        Field::Parent => Slot::Hash(e.parent.as_ref()),
        Field::Tokens => Slot::Tokens(&e.tokens),
        Field::BlockSize => Slot::U32(e.block_size),
        Field::LoraId => Slot::I64(e.lora_id),
        Field::Medium => Slot::Str(e.medium.as_deref()),
        Field::LoraName => Slot::Str(e.lora_name.as_deref()),
        Field::LoraNameOrSalt => match &e.cache_salt {
            Some(salt) => Slot::SaltMap(salt),
            None => Slot::Str(e.lora_name.as_deref()),
        },
        Field::ExtraKeys => Slot::ExtraKeys(e.extra_keys.as_deref()),
        Field::CacheSalt => Slot::Str(e.cache_salt.as_deref()),
        Field::GroupIdx => Slot::U32(e.group_idx),
        Field::Kind => Slot::Str(e.kind.as_deref()),
        Field::SlidingWindow => Slot::U32(e.sliding_window),
        Field::Locality => Slot::Str(e.locality.as_deref()),
        Field::SessionId => Slot::Str(e.session_id.as_deref()),
        Field::Ownership => Slot::Str(e.ownership.as_deref()),
    }
}

pub(crate) fn removed(e: &Removed, f: Field) -> Slot<'_> {
    match f {
        Field::Hashes => Slot::Hashes(&e.hashes),
        Field::Medium => Slot::Str(e.medium.as_deref()),
        Field::GroupIdx => Slot::U32(e.group_idx),
        Field::Kind => Slot::Str(e.kind.as_deref()),
        Field::SlidingWindow => Slot::U32(e.sliding_window),
        Field::Locality => Slot::Str(e.locality.as_deref()),
        Field::Ownership => Slot::Str(e.ownership.as_deref()),
        _ => Slot::Missing,
    }
}

pub(crate) fn other(e: &Other, f: Field) -> Slot<'_> {
    match f {
        Field::Ownership => Slot::Str(e.ownership.as_deref()),
        _ => Slot::Missing,
    }
}
