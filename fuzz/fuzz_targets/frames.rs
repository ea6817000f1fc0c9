//! ZMQ frame parser: the input is a list of frames (split on `kvscope_fuzz::SEPARATOR`), given to
//! `frame::parse_live` and `frame::parse_replay_reply`; a payload either yields goes on to
//! `decode_batch`, as on the server's intake.
#![no_main]

use kvscope_fuzz::split;
use kvscope_wire::frame::{parse_live, parse_replay_reply};
use kvscope_wire::{ReplayReply, decode_batch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let frames = split(data, 6);
    match parse_live(&frames) {
        Ok(m) => {
            assert_eq!(frames.len(), 3);
            assert_eq!(m.payload, frames[2]);
            let _ = decode_batch(m.payload);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match parse_replay_reply(&frames) {
        Ok(ReplayReply::Message { payload, .. }) => {
            assert!(!payload.is_empty(), "an empty payload ends a replay");
            let _ = decode_batch(payload);
        }
        Ok(ReplayReply::End) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
