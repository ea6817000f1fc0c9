//! How often the page gets a summary. Every [`FLUSH_MS`] while taking one is cheap; less often
//! when it costs the page's main thread more than [`PAGE_SHARE`] of its time, so a busy page (a
//! slow machine, a big fleet) stays responsive instead of spending every frame on summaries. The
//! page measures what each summary cost it and says so in its acknowledgement
//! ([`kvscope_engine_protocol::ToEngine::Ack`]); the fleet bar says when views refresh less often
//! ([`Pace::note`]).
//!
//! Plain Rust, no timers: the host asks it when the next summary may go.

use kvscope_engine_protocol::fmt::human_duration_ms;

/// The shortest time between two summaries, in milliseconds: ten a second.
pub const FLUSH_MS: f64 = 100.0;

/// The share of the page's main thread that taking summaries may use. The rest is for the
/// person: scrolling, hovering, the inspector.
pub const PAGE_SHARE: f64 = 0.25;

/// The longest time between two summaries, however costly they are: the page never goes more
/// than this without news.
pub const MAX_INTERVAL_MS: f64 = 2_000.0;

/// What summaries cost the page, and so how often they go.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pace {
    /// What one summary costs the page, in milliseconds: a dearer one counts at once, a cheaper
    /// one a quarter at a time, so one quiet summary does not undo the slowdown.
    page_ms: f64,
}

impl Pace {
    /// The page took a summary, at a cost of `page_ms` of its main thread.
    pub fn took(&mut self, page_ms: f64) {
        // A page that reports nothing sensible (an old page, a clock jump) costs nothing.
        let page_ms = if page_ms.is_finite() { page_ms.max(0.0) } else { 0.0 };
        self.page_ms = if page_ms >= self.page_ms { page_ms } else { self.page_ms * 0.75 + page_ms * 0.25 };
    }

    /// The time from one summary to the next, in milliseconds.
    pub fn interval_ms(&self) -> f64 {
        (self.page_ms / PAGE_SHARE).clamp(FLUSH_MS, MAX_INTERVAL_MS)
    }

    /// How long a summary that came due `since_last_ms` after the last one went still waits.
    pub fn wait_ms(&self, since_last_ms: f64) -> f64 {
        (self.interval_ms() - since_last_ms).max(0.0)
    }

    /// The fleet bar's line while views refresh less often than every [`FLUSH_MS`] (to a tenth
    /// of a second, so the line does not change with every summary).
    pub fn note(&self) -> Option<String> {
        let tenths = (self.interval_ms() / 100.0).round();
        (tenths > FLUSH_MS / 100.0).then(|| {
            format!(
                "views refresh every {} (not {}): each refresh costs this page {} of its main thread, held to {}% of its time",
                human_duration_ms(tenths * 100.0),
                human_duration_ms(FLUSH_MS),
                human_duration_ms(self.page_ms.round()),
                (PAGE_SHARE * 100.0).round()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cheap_summary_keeps_ten_a_second_and_no_note() {
        let mut p = Pace::default();
        assert_eq!(p.interval_ms(), FLUSH_MS);
        p.took(20.0);
        assert_eq!(p.interval_ms(), FLUSH_MS, "20 ms of every 100 ms is within the page's share");
        assert_eq!(p.note(), None);
        assert_eq!(p.wait_ms(30.0), 70.0);
        assert_eq!(p.wait_ms(250.0), 0.0);
    }

    #[test]
    fn a_dear_summary_spaces_the_next_so_the_page_keeps_its_share() {
        let mut p = Pace::default();
        p.took(100.0);
        assert_eq!(p.interval_ms(), 400.0, "100 ms a summary at 25% of the time: one every 400 ms");
        let note = p.note().unwrap();
        assert!(note.starts_with("views refresh every 400 ms (not 100 ms)"), "{note}");
        assert!(note.contains("costs this page 100 ms"), "{note}");
        assert!(note.ends_with("held to 25% of its time"), "{note}");
        p.took(10_000.0);
        assert_eq!(p.interval_ms(), MAX_INTERVAL_MS, "never more than 2 s without news");
    }

    #[test]
    fn it_slows_at_once_and_speeds_up_gradually() {
        let mut p = Pace::default();
        p.took(200.0);
        assert_eq!(p.interval_ms(), 800.0);
        p.took(0.0);
        assert_eq!(p.interval_ms(), 600.0, "one cheap summary undoes a quarter");
        for _ in 0..20 {
            p.took(5.0);
        }
        assert_eq!(p.interval_ms(), FLUSH_MS);
        assert_eq!(p.note(), None);
    }

    #[test]
    fn nonsense_costs_nothing() {
        let mut p = Pace::default();
        p.took(f64::NAN);
        p.took(-5.0);
        p.took(f64::INFINITY);
        assert_eq!(p.interval_ms(), FLUSH_MS);
    }
}
