//! Where one router indexer consuming every source of a capture stops: the first fatal event
//! fleet-wide, in arrival order, and what comes after it (the crashloop a restarted indexer
//! meets, the events it never sees). `kvscope check --json` reports it as `"fleet"`; the
//! dashboard's headline says the same from its own model, and the end-to-end tests compare the
//! two.
//!
//! Fed one record at a time, in capture order, with each engine source's running totals before
//! and after the record: the source whose fatal count first leaves 0 is where the indexer exits.

use std::collections::BTreeMap;

use serde::Serialize;

/// One engine source's running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub events: u64,
    pub fatal: u64,
}

#[derive(Clone, Debug)]
struct Exit {
    source: usize,
    recv_time_nanos: u64,
    /// Every source's totals once the exit's record was applied (the exit source's: before it).
    at_exit: Vec<Totals>,
}

/// The fleet's indexer exit, tracked over a capture.
#[derive(Debug, Default)]
pub struct FleetExit {
    exit: Option<Exit>,
}

impl FleetExit {
    /// After record of `source` was applied: `before`/`after` are that source's totals around
    /// it, `all` every source's totals now.
    pub fn record(&mut self, source: usize, recv_time_nanos: u64, before: Totals, after: Totals, all: impl FnOnce() -> Vec<Totals>) {
        if self.exit.is_some() || after.fatal == 0 {
            return;
        }
        let mut at_exit = all();
        if let Some(t) = at_exit.get_mut(source) {
            *t = before;
        }
        self.exit = Some(Exit { source, recv_time_nanos, at_exit });
    }

    /// `"fleet"` for `check --json`: the exit (source, seq, event index, receive time, the
    /// verdict's sentence), then per source the events and fatal events after it.
    /// `first_fatal` is the exit source's first fatal `(seq, event_index, text)`; `keys` and
    /// `finals` every engine source's key and final totals, in source order.
    pub fn report(&self, keys: &[String], finals: &[Totals], first_fatal: impl Fn(usize) -> Option<(u64, u32, String)>) -> FleetReport {
        let Some(e) = &self.exit else { return FleetReport::default() };
        let first = first_fatal(e.source);
        let first_index = first.as_ref().map_or(0, |f| u64::from(f.1));
        let mut report = FleetReport::default();
        for (i, (key, fin)) in keys.iter().zip(finals).enumerate() {
            let at = e.at_exit.get(i).copied().unwrap_or_default();
            let (events, fatal) = if i == e.source {
                // The exit's own batch: the events after the first fatal one count, it does not.
                (fin.events.saturating_sub(at.events + first_index + 1), fin.fatal.saturating_sub(1))
            } else {
                (fin.events.saturating_sub(at.events), fin.fatal.saturating_sub(at.fatal))
            };
            report.events_after_first_fatal += events;
            report.fatal_after_first_fatal += fatal;
            report.per_source.insert(key.clone(), After { events, fatal });
        }
        report.first_fatal = Some(FirstFatal {
            source: keys.get(e.source).cloned(),
            seq: first.as_ref().map(|f| f.0),
            event_index: first.as_ref().map(|f| f.1),
            recv_time_nanos: e.recv_time_nanos,
            utc: kvscope_protocol::time::utc(e.recv_time_nanos),
            error: first.map(|f| f.2),
        });
        report
    }
}

/// Where the fleet's indexer stops, and what comes after (`check --json`'s `"fleet"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FleetReport {
    pub first_fatal: Option<FirstFatal>,
    pub events_after_first_fatal: u64,
    pub fatal_after_first_fatal: u64,
    pub per_source: BTreeMap<String, After>,
}

/// The fleet's first fatal event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FirstFatal {
    pub source: Option<String>,
    pub seq: Option<u64>,
    pub event_index: Option<u32>,
    pub recv_time_nanos: u64,
    pub utc: String,
    pub error: Option<String>,
}

/// A source's events and fatal events after the fleet's first fatal one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct After {
    pub events: u64,
    pub fatal: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_fatal_in_arrival_order_is_the_exit_and_what_follows_is_counted() {
        let mut f = FleetExit::default();
        let t = |events, fatal| Totals { events, fatal };
        // Source 1 applies a clean batch, then source 0's batch holds the first fatal at index 2.
        f.record(1, 10, t(0, 0), t(5, 0), || vec![t(0, 0), t(5, 0)]);
        f.record(0, 20, t(0, 0), t(4, 2), || vec![t(4, 2), t(5, 0)]);
        // Later source 1 meets 3 fatal events in 6 more.
        f.record(1, 30, t(5, 0), t(11, 3), || vec![t(4, 2), t(11, 3)]);
        let keys = ["0:0".to_owned(), "1:0".to_owned()];
        let j = serde_json::to_value(f.report(&keys, &[t(4, 2), t(11, 3)], |_| Some((7, 2, "fatal".into())))).unwrap();
        assert_eq!(j["first_fatal"]["source"], "0:0");
        assert_eq!(j["first_fatal"]["seq"], 7);
        assert_eq!(j["first_fatal"]["recv_time_nanos"], 20);
        // Source 0: 4 events, the fatal one at index 2, so 1 after it; 1 more fatal.
        assert_eq!(j["per_source"]["0:0"], json!({"events": 1, "fatal": 1}));
        assert_eq!(j["per_source"]["1:0"], json!({"events": 6, "fatal": 3}));
        assert_eq!(j["events_after_first_fatal"], 7);
        assert_eq!(j["fatal_after_first_fatal"], 4);
    }

    #[test]
    fn no_fatal_is_no_exit() {
        let f = FleetExit::default();
        let j = serde_json::to_value(f.report(&["0:0".to_owned()], &[Totals { events: 3, fatal: 0 }], |_| None)).unwrap();
        assert!(j["first_fatal"].is_null());
    }
}
