//! `decode_each` hands over exactly what `decode_batch` collects, only once the whole payload
//! decoded, in bounded memory.

use kvscope_wire::{BatchHeader, Decoded, EventSink, KvEvent, STREAM_CHUNK, decode_batch, decode_each};

#[derive(Default)]
struct Record {
    inspected: Vec<KvEvent>,
    header: Option<BatchHeader>,
    events: Vec<KvEvent>,
}

impl EventSink for Record {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        assert_eq!(index as usize, self.inspected.len());
        assert!(self.header.is_none(), "inspect after begin");
        self.inspected.push(event.clone());
    }
    fn begin(&mut self, header: &BatchHeader) {
        assert!(self.header.replace(*header).is_none(), "begin twice");
    }
    fn event(&mut self, index: u32, event: &KvEvent) {
        assert_eq!(index as usize, self.events.len());
        assert!(self.header.is_some(), "event before begin");
        self.events.push(event.clone());
    }
}

fn streamed(bytes: &[u8]) -> (Result<BatchHeader, kvscope_wire::DecodeError>, Record) {
    let mut r = Record::default();
    (decode_each(bytes, &mut r), r)
}

#[test]
fn every_corpus_payload_streams_as_it_collects() {
    for entry in kvscope_corpus::manifest() {
        let batch = decode_batch(entry.payload()).unwrap();
        let (header, r) = streamed(entry.payload());
        assert_eq!(header.unwrap(), batch.header(), "{}", entry.file);
        assert_eq!(r.header, Some(batch.header()));
        assert_eq!((&r.inspected, &r.events), (&batch.events, &batch.events), "{}", entry.file);
    }
}

/// `[1.5, [[tag] x n], 0]`.
fn batch_of_cleared(n: usize) -> Vec<u8> {
    let mut out = vec![0x93, 0xcb];
    out.extend_from_slice(&1.5f64.to_be_bytes());
    out.push(0xdc);
    out.extend_from_slice(&(n as u16).to_be_bytes());
    for _ in 0..n {
        out.push(0x91);
        out.push(0xb0);
        out.extend_from_slice(b"AllBlocksCleared");
    }
    out.push(0x07);
    out
}

#[test]
fn batches_past_the_chunk_stream_as_they_collect_and_failures_hand_over_nothing() {
    for n in [0, 1, STREAM_CHUNK, STREAM_CHUNK + 1, 3 * STREAM_CHUNK] {
        let bytes = batch_of_cleared(n);
        let batch = decode_batch(&bytes).unwrap();
        let (header, r) = streamed(&bytes);
        assert_eq!(header.unwrap(), batch.header());
        assert_eq!((r.inspected.len(), r.events.len()), (n, n));
        assert_eq!(r.events, batch.events);
        // Cut the last byte: the same error, and no event handed over.
        let cut = &bytes[..bytes.len() - 1];
        let (err, r) = streamed(cut);
        assert_eq!(err.unwrap_err(), decode_batch(cut).unwrap_err());
        assert!(r.header.is_none() && r.events.is_empty(), "n = {n}");
    }
}

/// A map batch that names `events` twice keeps the last, like any duplicated key: only its events
/// are handed over, though both are checked.
#[test]
fn a_map_batch_with_two_events_keys_keeps_the_last() {
    let cleared = |out: &mut Vec<u8>| {
        out.push(0x91);
        out.push(0xb0);
        out.extend_from_slice(b"AllBlocksCleared");
    };
    let mut bytes = vec![0x83, 0xa2, b't', b's', 0x01, 0xa6];
    bytes.extend_from_slice(b"events");
    bytes.push(0x92);
    cleared(&mut bytes);
    cleared(&mut bytes);
    bytes.push(0xa6);
    bytes.extend_from_slice(b"events");
    bytes.push(0x91);
    bytes.extend_from_slice(&[0x92, 0xa5]);
    bytes.extend_from_slice(b"Other");
    bytes.push(0x01);
    let batch = decode_batch(&bytes).unwrap();
    assert_eq!(batch.events.len(), 1);
    assert!(matches!(&batch.events[0], KvEvent::Unknown(u) if u.tag == "Other"));
    let (header, r) = streamed(&bytes);
    assert_eq!(header.unwrap().events, 1);
    assert_eq!(r.events, batch.events);
    assert_eq!(r.inspected, batch.events);
}

#[test]
fn events_are_small() {
    assert!(std::mem::size_of::<KvEvent>() <= 40, "{}", std::mem::size_of::<KvEvent>());
    assert!(std::mem::size_of::<Option<kvscope_wire::WireStr>>() == 24);
}

/// What a sink was handed, comparable.
fn log(r: &Record) -> (&[KvEvent], Option<BatchHeader>, &[KvEvent]) {
    (&r.inspected, r.header, &r.events)
}

/// One decode fed to several sinks hands each what `decode_each` would: every corpus payload,
/// every truncation of a few (errors after some events), and a batch past the chunk.
#[test]
fn a_payload_decoded_once_feeds_each_sink_as_decode_each_does() {
    let mut payloads: Vec<Vec<u8>> = kvscope_corpus::manifest().iter().map(|e| e.payload().to_vec()).collect();
    let cut: Vec<Vec<u8>> = payloads.iter().take(6).flat_map(|p| (0..p.len()).map(|n| p[..n].to_vec())).collect();
    payloads.extend(cut);
    payloads.push(batch_of_cleared(STREAM_CHUNK + 3));
    let mut errors = 0;
    for bytes in &payloads {
        let (want_result, want) = streamed(bytes);
        // Keeping the token ids as bytes changes nothing a sink is handed.
        for decoded in [Decoded::new(bytes), Decoded::with_token_bytes(bytes)] {
            for _ in 0..3 {
                let mut got = Record::default();
                let result = decoded.feed(bytes, &mut got);
                assert_eq!(result, want_result);
                assert_eq!(log(&got), log(&want));
            }
        }
        errors += usize::from(want_result.is_err() && !want.inspected.is_empty());
    }
    assert!(errors > 0, "some truncation fails after its first events");
}

/// A batch of one vLLM store of `tokens` token ids (array layout).
fn batch_of_one_long_store(tokens: u32) -> Vec<u8> {
    use rmp::encode::{ValueWriteError, write_array_len, write_str, write_uint};
    const NIL: u8 = 0xc0;
    let store = |out: &mut Vec<u8>| -> Result<(), ValueWriteError> {
        write_array_len(out, 6)?;
        write_str(out, "BlockStored")?;
        write_array_len(out, 2)?;
        write_uint(out, 11)?;
        write_uint(out, 12)?;
        out.push(NIL);
        write_array_len(out, tokens)?;
        for t in 0..tokens {
            write_uint(out, u64::from(1000 + t))?;
        }
        write_uint(out, u64::from(tokens / 2))?;
        out.push(NIL);
        Ok(())
    };
    let mut out = vec![0x93, 0xcb];
    out.extend_from_slice(&1.5f64.to_be_bytes());
    out.push(0x91);
    // Writing into a Vec cannot fail; a batch cut short would fail the decode below anyway.
    let _ = store(&mut out);
    out.push(0x07);
    out
}

/// Long prompts' events, with their ids kept as bytes, are worth handing on decoded; small
/// events, and a batch past the chunk (which keeps none), are not.
#[test]
fn decoded_events_are_handed_on_only_when_they_hold_at_most_twice_their_payload() {
    let long = batch_of_one_long_store(2048);
    let decoded = Decoded::new(&long);
    assert_eq!(decoded.events().map(<[KvEvent]>::len), Some(1));
    assert!(decoded.worth_handing_on(), "one store of 2,048 token ids in {} bytes", long.len());
    // Its ids as bytes take four each, more than the uint16s they were, but not twice as much.
    let with_bytes = Decoded::with_token_bytes(&long);
    assert!(with_bytes.token_bytes().is_some_and(|t| t.held_bytes() > long.len()));
    assert!(with_bytes.worth_handing_on());
    let small = batch_of_cleared(50);
    assert!(!Decoded::new(&small).worth_handing_on(), "50 clears in {} bytes", small.len());
    assert!(!Decoded::new(&batch_of_cleared(STREAM_CHUNK + 3)).worth_handing_on());
    // A payload cut short keeps its error and no event: handing that on costs nothing either.
    let cut = Decoded::new(&long[..long.len() / 2]);
    assert!(cut.worth_handing_on());
    assert!(cut.feed(&long[..long.len() / 2], &mut Record::default()).is_err());
}
