//! Events per second over a sliding window, fed with explicit times so it is testable natively.

use std::collections::VecDeque;

/// Counts per 250 ms slot over the last few seconds.
#[derive(Clone, Debug)]
pub struct RateMeter {
    window_ms: f64,
    slot_ms: f64,
    slots: VecDeque<(f64, u64)>,
}

impl Default for RateMeter {
    fn default() -> Self {
        RateMeter { window_ms: 5_000.0, slot_ms: 250.0, slots: VecDeque::new() }
    }
}

impl RateMeter {
    /// Adds `n` at time `now_ms`.
    pub fn add(&mut self, now_ms: f64, n: u64) {
        let slot = (now_ms / self.slot_ms).floor() * self.slot_ms;
        match self.slots.back_mut() {
            Some((t, c)) if *t == slot => *c += n,
            _ => self.slots.push_back((slot, n)),
        }
        self.trim(now_ms);
    }

    fn trim(&mut self, now_ms: f64) {
        while let Some(&(t, _)) = self.slots.front() {
            if t + self.window_ms < now_ms {
                self.slots.pop_front();
            } else {
                break;
            }
        }
    }

    /// Rate per second at `now_ms`, averaged over the window (or since the first count, if
    /// that is more recent, so the figure is right from the first second).
    pub fn per_second(&self, now_ms: f64) -> f64 {
        let live: Vec<_> = self.slots.iter().filter(|(t, _)| t + self.window_ms >= now_ms).collect();
        let Some(first) = live.first() else { return 0.0 };
        let total: u64 = live.iter().map(|(_, c)| c).sum();
        let span_ms = (now_ms - first.0).clamp(self.slot_ms, self.window_ms);
        total as f64 * 1000.0 / span_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_stream_reads_as_its_rate_and_decays_to_zero() {
        let mut m = RateMeter::default();
        for i in 0..100 {
            m.add(i as f64 * 50.0, 10); // 200 per second for 5 s
        }
        let r = m.per_second(5_000.0);
        assert!((r - 200.0).abs() < 15.0, "{r}");
        assert_eq!(m.per_second(20_000.0), 0.0);
    }
}
