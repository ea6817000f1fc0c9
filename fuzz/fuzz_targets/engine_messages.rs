//! The dashboard's page-engine messages: `kvscope_engine_protocol::decode` on the input, as a
//! request to the engine and as an answer to the page. Whatever decodes must encode to bytes
//! that decode and encode to the same bytes (each side decodes what the other encodes; bytes,
//! not values, are compared: a NaN figure is not equal to itself). A message that does not
//! decode is an error with words, never a panic: the page says so and stops looking live.
#![no_main]

use kvscope_engine_protocol::{FromEngine, ToEngine, decode, encode};
use libfuzzer_sys::fuzz_target;

fn round_trip<T: serde::Serialize + for<'de> serde::Deserialize<'de> + std::fmt::Debug>(data: &[u8]) {
    match decode::<T>(data) {
        Ok(message) => {
            let once = encode(&message);
            let again = decode::<T>(&once).unwrap_or_else(|e| panic!("re-encoded {message:?} does not decode: {e}"));
            assert_eq!(encode(&again), once, "encode(decode(encode(m))) != encode(m)");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<ToEngine>(data);
    round_trip::<FromEngine>(data);
});
