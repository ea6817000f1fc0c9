//! Integration tests of the `kvscope` binary, over real sockets on loopback. One test binary,
//! one module per area (ripgrep's layout), each saying what belongs there. Every test picks free
//! ports and waits for conditions with deadlines; none sleeps and hopes.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod capture;
mod cli;
mod corpus;
mod discovery;
mod event_plane;
mod faults;
mod intake;
mod late_join;
mod peers;
mod prometheus;
mod relay;
mod router_index;
mod security;
mod support;
