//! Protocol decoder: `kvscope_protocol::decode` on the input. Whatever decodes must encode
//! again to bytes that decode to a message encoding to the same bytes (the server encodes, the
//! browser decodes: a message one side can build, the other must read).
#![no_main]

use kvscope_protocol as proto;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match proto::decode(data) {
        Ok(message) => {
            let once = proto::encode(&message);
            let again = proto::decode(&once)
                .unwrap_or_else(|e| panic!("re-encoded {message:?} does not decode: {e}"));
            assert_eq!(
                proto::encode(&again),
                once,
                "encode(decode(encode(m))) != encode(m)"
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
