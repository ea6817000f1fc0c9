//! The writer: container headers through rmp's low-level writers, every value through
//! rmp-serde's [`Serializer`] (token ids by hand, in the same shortest forms), in the order a
//! [`Layout`] gives.
//!
//! The headers are written by hand-picked calls rather than serde's `serialize_seq` because a
//! layout decides a map's width (msgspec's `map16` quirk), which serde cannot express; values
//! go through serde so ints, strings and bins get msgpack's shortest forms, as msgspec writes
//! them.

use rmp_serde::Serializer;
use serde::Serialize;

use crate::error::EncodeError;
use crate::event::{Batch, Event, Tokens};
use crate::layout::{BatchForm, EventForm, Field, Layout, MapHeader, Presence};
use crate::slot::{self, Slot};

/// Writes into a `Vec`; the first failure (a length msgpack cannot hold, a value serde refuses)
/// is kept and ends the encoding with an error, and what follows it is not written.
struct Out {
    ser: Serializer<Vec<u8>>,
    failed: Option<String>,
}

impl Out {
    fn fail(&mut self, message: String) {
        self.failed.get_or_insert(message);
    }

    fn array(&mut self, len: usize) {
        if self.failed.is_some() {
            return;
        }
        let Ok(len) = u32::try_from(len) else {
            return self.fail(format!("an array of {len} items: msgpack arrays hold at most u32::MAX"));
        };
        if let Err(e) = rmp::encode::write_array_len(self.ser.get_mut(), len) {
            self.fail(format!("array header: {e}"));
        }
    }

    fn map(&mut self, len: usize, header: MapHeader) {
        if self.failed.is_some() {
            return;
        }
        match header {
            MapHeader::Shortest => {
                let Ok(len) = u32::try_from(len) else {
                    return self.fail(format!("a map of {len} entries: msgpack maps hold at most u32::MAX"));
                };
                if let Err(e) = rmp::encode::write_map_len(self.ser.get_mut(), len) {
                    self.fail(format!("map header: {e}"));
                }
            }
            MapHeader::Map16 => {
                // rmp has no "map16 whatever the length" writer: marker, then the u16 count.
                let Ok(len) = u16::try_from(len) else {
                    return self.fail(format!("a map of {len} entries: a map16 header holds at most 65535"));
                };
                let buf = self.ser.get_mut();
                buf.push(rmp::Marker::Map16.to_u8());
                buf.extend_from_slice(&len.to_be_bytes());
            }
        }
    }

    /// A field's value. Token ids, most of a long prompt's bytes, are written without serde:
    /// through it each id cost a quarter of the demo's encoding time.
    fn slot(&mut self, slot: &Slot<'_>) {
        match slot {
            Slot::Tokens(Tokens::Ids(ids)) if self.failed.is_none() => {
                self.array(ids.len());
                let buf = self.ser.get_mut();
                buf.reserve(ids.len() * 3);
                for &id in ids {
                    push_int(buf, id);
                }
            }
            _ => self.value(slot),
        }
    }

    fn value<T: Serialize + ?Sized>(&mut self, v: &T) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = v.serialize(&mut self.ser) {
            self.fail(e.to_string());
        }
    }
}

/// `v` in msgpack's shortest form, as rmp's `write_sint` (and msgspec) writes it: the unsigned
/// markers up to `u32::MAX` by hand, anything else through rmp.
#[inline]
fn push_int(buf: &mut Vec<u8>, v: i64) {
    match v {
        0..=0x7f => buf.push(v as u8),
        0x80..=0xff => buf.extend_from_slice(&[rmp::Marker::U8.to_u8(), v as u8]),
        0x100..=0xffff => {
            buf.push(rmp::Marker::U16.to_u8());
            buf.extend_from_slice(&(v as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            buf.push(rmp::Marker::U32.to_u8());
            buf.extend_from_slice(&(v as u32).to_be_bytes());
        }
        // Writing into a Vec cannot fail.
        _ => {
            let _ = rmp::encode::write_sint(buf, v);
        }
    }
}

/// Encodes `batch` in `layout`, or says which field the layout has no place for.
pub fn encode_batch(layout: &Layout, batch: &Batch) -> Result<Vec<u8>, EncodeError> {
    check(layout, batch)?;
    encode_batch_lossy(layout, batch)
}

/// Encodes `batch` in `layout`, leaving out whatever the layout has no place for (as an engine
/// of that release would never have set it). For the demo, which publishes one simulated
/// engine's events in several releases' layouts. Fails only on what msgpack cannot hold (more
/// than u32::MAX events, say).
pub fn encode_batch_lossy(layout: &Layout, batch: &Batch) -> Result<Vec<u8>, EncodeError> {
    let mut out = Out { ser: Serializer::new(Vec::with_capacity(64 + 64 * batch.events.len())), failed: None };
    match layout.batch {
        BatchForm::Array { len } => {
            out.array(len as usize);
            out.value(&batch.ts);
            events(&mut out, layout, &batch.events);
            if len >= 3 {
                out.value(&batch.dp_rank);
            }
            for _ in 3..len {
                out.value(&());
            }
        }
        BatchForm::Map => {
            out.map(3, MapHeader::Shortest);
            out.value("ts");
            out.value(&batch.ts);
            out.value("events");
            events(&mut out, layout, &batch.events);
            out.value("data_parallel_rank");
            out.value(&batch.dp_rank);
        }
    }
    match out.failed {
        None => Ok(out.ser.into_inner()),
        Some(message) => Err(EncodeError { layout: layout.name, at: "batch".into(), message }),
    }
}

fn events(out: &mut Out, layout: &Layout, events: &[Event]) {
    out.array(events.len());
    for e in events {
        match layout.events {
            EventForm::Array { stored, removed } => match e {
                Event::Stored(s) => array_event(out, "BlockStored", stored, |f| slot::stored(s, f)),
                Event::Removed(r) => array_event(out, "BlockRemoved", removed, |f| slot::removed(r, f)),
                Event::Other(o) => array_event(out, &o.tag, &[], |f| slot::other(o, f)),
            },
            EventForm::Map { stored, removed, other, stored_header } => match e {
                Event::Stored(s) => map_event(out, "BlockStored", stored, stored_header, |f| slot::stored(s, f)),
                Event::Removed(r) => map_event(out, "BlockRemoved", removed, MapHeader::Shortest, |f| slot::removed(r, f)),
                Event::Other(o) => map_event(out, &o.tag, other, MapHeader::Shortest, |f| slot::other(o, f)),
            },
        }
    }
}

fn array_event<'a>(out: &mut Out, tag: &str, fields: &[Field], slot: impl Fn(Field) -> Slot<'a>) {
    out.array(1 + fields.len());
    out.value(tag);
    for &f in fields {
        out.slot(&slot(f));
    }
}

fn map_event<'a>(out: &mut Out, tag: &str, fields: &[(Field, Presence)], header: MapHeader, slot: impl Fn(Field) -> Slot<'a>) {
    let written: Vec<(Field, Slot<'a>)> = fields
        .iter()
        .map(|&(f, p)| (f, p, slot(f)))
        .filter(|(_, p, s)| *p == Presence::Always || s.is_set())
        .map(|(f, _, s)| (f, s))
        .collect();
    out.map(1 + written.len(), header);
    out.value("type");
    out.value(tag);
    for (f, s) in &written {
        out.value(f.key());
        out.slot(s);
    }
}

/// Every set field must have a place in the layout.
fn check(layout: &Layout, batch: &Batch) -> Result<(), EncodeError> {
    let fail = |at: String, message: String| EncodeError { layout: layout.name, at, message };
    if let (BatchForm::Array { len: 2 }, Some(rank)) = (layout.batch, batch.dp_rank) {
        return Err(fail("batch".into(), format!("a 2-element batch has no dp_rank (got {rank})")));
    }
    for (i, e) in batch.events.iter().enumerate() {
        let listed = listed_fields(layout, e);
        let unplaced = match e {
            Event::Stored(s) => unplaced(slot::STORED_FIELDS, &listed, |f| slot::stored(s, f)),
            Event::Removed(r) => unplaced(slot::REMOVED_FIELDS, &listed, |f| slot::removed(r, f)),
            Event::Other(o) => unplaced(slot::OTHER_FIELDS, &listed, |f| slot::other(o, f)),
        };
        let name = match e {
            Event::Stored(_) => "BlockStored",
            Event::Removed(_) => "BlockRemoved",
            Event::Other(o) => o.tag.as_str(),
        };
        if let Some(f) = unplaced {
            return Err(fail(format!("events[{i}]"), format!("{name} has no {} in this layout", f.key())));
        }
        if let Event::Stored(s) = e
            && listed.contains(&Field::LoraNameOrSalt)
            && s.lora_name.is_some()
            && s.cache_salt.is_some()
        {
            return Err(fail(format!("events[{i}]"), "position 7 holds lora_name or {cache_salt}, not both".into()));
        }
    }
    Ok(())
}

/// The fields `layout` writes for an event like `e`.
fn listed_fields(layout: &Layout, e: &Event) -> Vec<Field> {
    match layout.events {
        EventForm::Array { stored, removed } => match e {
            Event::Stored(_) => stored.to_vec(),
            Event::Removed(_) => removed.to_vec(),
            Event::Other(_) => Vec::new(),
        },
        EventForm::Map { stored, removed, other, .. } => {
            let fields = match e {
                Event::Stored(_) => stored,
                Event::Removed(_) => removed,
                Event::Other(_) => other,
            };
            fields.iter().map(|(f, _)| *f).collect()
        }
    }
}

/// The first field of `can` that is set but has no place among `listed`.
fn unplaced<'a>(can: &[Field], listed: &[Field], slot: impl Fn(Field) -> Slot<'a>) -> Option<Field> {
    can.iter().copied().find(|&f| slot(f).is_set() && !listed.iter().any(|&l| slot::covers(l, f)))
}

#[cfg(test)]
mod tests {
    use super::push_int;

    /// The hand-written forms are rmp's, at every boundary and beyond the ones written by hand.
    #[test]
    fn token_ids_are_written_as_rmp_writes_them() {
        let edges =
            [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 163_839, 0xffff_ffff, 0x1_0000_0000, i64::MAX, -1, -32, -33, i64::MIN];
        for v in edges {
            let (mut ours, mut rmp) = (Vec::new(), Vec::new());
            push_int(&mut ours, v);
            let _ = rmp::encode::write_sint(&mut rmp, v);
            assert_eq!(ours, rmp, "{v}");
        }
    }
}
