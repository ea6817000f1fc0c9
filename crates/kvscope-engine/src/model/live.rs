//! How far behind live the page is, in time, and how fast it applies frames meanwhile.
//!
//! The queue's bytes say how much is waiting; an operator asks how old what the page shows is.
//! Each live frame carries the server's receive time. Applied at wall-clock time `w`, its delay
//! is `w - recv`, which is the network's delay, the two clocks' skew, and the page's own
//! backlog. The smallest delay seen is taken as "live" (the skew and the network, as NTP's
//! minimum filter takes it), so the page's lag is a frame's delay beyond that smallest one. It
//! needs no clock in common with the server. Frames of the server's history are not live, and
//! are not measured: "catching up: N of M frames" is about them.

use crate::model::rate::RateMeter;

/// Behind by less than this, the page is live.
pub const BEHIND_LIVE_MS: f64 = 2_000.0;

/// A late frame applied this recently says the page is still behind.
pub const RECENT_MS: f64 = 1_000.0;

#[derive(Clone, Debug, Default)]
pub struct LiveLag {
    /// The smallest delay seen (wall clock at apply minus the server's receive time), in ms.
    baseline_ms: Option<f64>,
    /// The last applied live frame's delay beyond the baseline, and when it was applied (the
    /// page's clock).
    lag_ms: f64,
    applied_at_ms: f64,
    /// Live frames applied, per second.
    applied: RateMeter,
}

/// The page is behind live: by how much, and how fast it applies frames.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Behind {
    pub lag_ms: f64,
    pub frames_per_second: f64,
}

impl LiveLag {
    /// A live frame received by the server at `recv_time_nanos` was applied at `wall_ms` (Unix
    /// ms) and `now_ms` (the page's clock, for the rate).
    pub fn frame(&mut self, recv_time_nanos: u64, wall_ms: f64, now_ms: f64) {
        let delay = wall_ms - recv_time_nanos as f64 / 1e6;
        let baseline = *self.baseline_ms.get_or_insert(delay);
        let baseline = baseline.min(delay);
        self.baseline_ms = Some(baseline);
        self.lag_ms = delay - baseline;
        self.applied_at_ms = now_ms;
        self.applied.add(now_ms, 1);
    }

    /// Behind live by [`BEHIND_LIVE_MS`] or more, while frames still come late: some wait in
    /// the page's queue, or one was applied within [`RECENT_MS`]. (The backlog may sit in the
    /// server's queue for this page or in the socket, where the page cannot count it.) A late
    /// frame followed by nothing means the page has applied all there was: it is live.
    pub fn behind(&self, waiting: bool, now_ms: f64) -> Option<Behind> {
        let late_still = waiting || now_ms - self.applied_at_ms <= RECENT_MS;
        (late_still && self.lag_ms >= BEHIND_LIVE_MS)
            .then(|| Behind { lag_ms: self.lag_ms, frames_per_second: self.applied.per_second(now_ms) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKEW_MS: f64 = 3_600_000.0; // the page's clock an hour ahead of the server's

    #[test]
    fn lag_is_the_delay_beyond_the_smallest_whatever_the_clocks_skew() {
        let mut l = LiveLag::default();
        // 100 frames a second, applied at once: live.
        for i in 0..100u64 {
            let recv = 1_000_000_000_000 + i * 10_000_000;
            l.frame(recv, recv as f64 / 1e6 + SKEW_MS + 5.0, i as f64 * 10.0);
        }
        assert_eq!(l.behind(true, 1_000.0), None);
        // Then the page applies frames 27 s after the server received them, 500 a second.
        for i in 0..500u64 {
            let recv = 1_000_001_000_000 + i * 2_000_000;
            l.frame(recv, recv as f64 / 1e6 + SKEW_MS + 5.0 + 27_000.0, 10_000.0 + i as f64 * 2.0);
        }
        let b = l.behind(true, 11_000.0).unwrap();
        assert!((b.lag_ms - 27_000.0).abs() < 1e-3, "{b:?}");
        assert!((b.frames_per_second - 500.0).abs() < 60.0, "{b:?}");
        // The queue is empty, but the last late frame was just applied: the backlog is upstream.
        assert!(l.behind(false, 11_000.0).is_some());
        // Nothing waits and nothing came for over a second: the page applied all there was.
        assert_eq!(l.behind(false, 12_500.0), None);
    }
}
