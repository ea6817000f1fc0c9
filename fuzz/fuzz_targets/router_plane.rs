//! Dynamo's event plane: the input is split on `kvscope_fuzz::SEPARATOR` into an engine payload
//! and then either the four frames of one ZMQ-plane message or NATS message bodies. The payload
//! is predicted under `dynamo-1.6.1`, the plane messages decoded and reconciled with it; the
//! counts must add up.
#![no_main]

use kvscope_fuzz::split;
use kvscope_router::{Reconciler, ReconcilerConfig, RelayConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let pieces = split(data, 6);
    let mut r = Reconciler::new(ReconcilerConfig { max_pending: 8, lookahead: 2, details_kept: 4, ..ReconcilerConfig::default() });
    let id = r.add_source("42", RelayConfig::dynamo_1_6_1(42, 0, 16));
    let _ = r.push_engine(id, 0, pieces[0]);
    let plane = &pieces[1..];
    if plane.len() == 4 {
        let _ = r.push_zmq_frames(plane);
    } else {
        for body in plane {
            let _ = r.push_plane_message(body);
        }
    }
    r.finish();
    let report = r.report();
    let c = &report.sources[0].router;
    assert_eq!(c.expected, c.matched + c.mismatched + c.missing + c.overflowed_expected);
    assert_eq!(c.received, c.matched + c.mismatched + c.unexpected + c.overflowed_received);
    assert_eq!((c.pending_expected, c.pending_received), (0, 0));
    let _ = kvscope_router::predict(pieces[0], 42, 0, 16, kvscope_normalize::Policy::DYNAMO_1_6_1);
});
