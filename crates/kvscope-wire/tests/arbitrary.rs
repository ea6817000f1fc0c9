//! No input panics the decoder: arbitrary bytes, and corpus payloads with bytes flipped.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        match kvscope_wire::decode_batch(&bytes) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.offset() <= bytes.len()),
        }
    }

    #[test]
    fn mutated_corpus_payloads_never_panic(
        index in 0usize..381,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let manifest = kvscope_corpus::manifest();
        let entry = &manifest[index % manifest.len()];
        let mut bytes = entry.payload().to_vec();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Err(e) = kvscope_wire::decode_batch(&bytes) {
            prop_assert!(e.offset() <= bytes.len());
            prop_assert!(!e.message().is_empty());
        }
    }
}
