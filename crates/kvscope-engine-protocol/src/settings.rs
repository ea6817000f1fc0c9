//! What the page is set to, and its round trip through the URL query string.
//!
//! Everything an operator would want a shared link to reproduce lives here: the two policies,
//! the block size, the filters and the selected event. The query string is the only place it
//! is persisted; the page's `url.rs` reads it at start and writes it back with
//! `History::replaceState` (the rejected alternative, leptos_router, costs about 60 KB of gzip
//! for two query helpers). The page owns the settings; the engine gets a copy with every change
//! ([`crate::ViewQuery`]).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Which of the two compared policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Side {
    A,
    /// The default where one side is shown: B is the candidate being checked.
    #[default]
    B,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
    pub fn parse(s: &str) -> Option<Side> {
        match s {
            "a" | "A" => Some(Side::A),
            "b" | "B" => Some(Side::B),
            _ => None,
        }
    }
    pub fn is_b(self) -> bool {
        self == Side::B
    }
}

/// An event named by where it came from, stable across reloads and shareable: source key
/// (`w0:0`), the frame's sequence number and the event's index in the batch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventRef {
    pub source: String,
    pub seq: u64,
    pub index: u32,
}

impl EventRef {
    pub fn to_param(&self) -> String {
        format!("{}/{}/{}", self.source, self.seq, self.index)
    }
    pub fn parse(s: &str) -> Option<EventRef> {
        let mut it = s.rsplitn(3, '/');
        let index = it.next()?.parse().ok()?;
        let seq = it.next()?.parse().ok()?;
        let source = it.next()?.to_owned();
        if source.is_empty() {
            return None;
        }
        Some(EventRef { source, seq, index })
    }
}

/// The page's settings. `None` means "use the server's default".
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Settings {
    /// Policy A preset (`legacy` by default).
    pub policy_a: Option<String>,
    /// Policy B preset (`fixed` by default).
    pub policy_b: Option<String>,
    /// Configured block size in tokens.
    pub block_size: Option<u32>,
    /// Which policy's verdicts the timeline colours.
    pub lanes: Option<Side>,
    /// Which policy's verdicts build the tier trees (B by default: the candidate).
    pub trees: Option<Side>,
    /// Show only sources whose key contains this text.
    pub worker_filter: String,
    /// Sources opened from the fleet overview (`worker:rank`): their cards, lanes and trees.
    pub open: Vec<String>,
    /// Show only this tier in the tree view (`device`, `host_pinned`, ...).
    pub tier_filter: Option<String>,
    /// The tree view's selected (source, tier).
    pub tree: Option<(String, String)>,
    /// Block hash searched across the fleet (hex).
    pub hash: String,
    /// The selected event.
    pub selected: Option<EventRef>,
    /// Memory bound for retained frames' raw bytes, in MiB (`?mem=`).
    pub retain_mib: Option<u32>,
    /// Bound on retained event records, in events (`?events=`).
    pub retain_events: Option<usize>,
    /// Bound on the nodes each modelled router index keeps, and on the blocks the engines' truth
    /// beside them holds (`?indexnodes=`); `None`: the index model's own default.
    pub index_nodes: Option<usize>,
    /// Bound on what the page received and has not applied yet, in MiB (`?intake=`).
    pub intake_mib: Option<u32>,
    /// Payloads larger than this many MiB are refused before decoding (`?maxframe=`), as the
    /// server's `--max-frame-bytes` does: a capture opened from disk has no server in front.
    pub max_frame_mib: Option<u32>,
    /// The timeline's visible window, in milliseconds since the first frame; `None` follows live.
    pub window_ms: Option<(f64, f64)>,
    /// The timeline's marks: only mismatches (the default) or every event (`?show=all`).
    pub show_all: bool,
    /// Open a WebSocket to this URL instead of the page's own `/ws`.
    pub ws: Option<String>,
    /// Do not connect at all (captures only).
    pub offline: bool,
    /// Engine workers the fleet is spread over (`?engines=`): each reads its shard of the
    /// workers, on a core of its own. Read when the page starts.
    pub engines: Option<u32>,
}

pub const DEFAULT_POLICY_A: &str = "legacy";
pub const DEFAULT_POLICY_B: &str = "fixed";
pub const DEFAULT_RETAIN_MIB: u32 = 128;
/// Event records kept by default (`?events=`): minutes of a 50,000 events/s fleet.
pub const DEFAULT_RETAIN_EVENTS: usize = 5_000_000;
/// What the page may hold received but not yet applied, by default (`?intake=`), in MiB.
pub const DEFAULT_INTAKE_MIB: u32 = 256;
/// As the server's `--max-frame-bytes` default.
pub const DEFAULT_MAX_FRAME_MIB: u32 = 16;
/// Engine workers by default (`?engines=`).
pub const DEFAULT_ENGINES: u32 = 1;
/// At most this many engine workers: each holds its own retention bounds.
pub const MAX_ENGINES: u32 = 16;

impl Settings {
    /// Opens a source from the overview (its card, lane and trees), or closes it when open.
    pub fn toggle_open(&mut self, key: &str) {
        if let Some(i) = self.open.iter().position(|k| k == key) {
            self.open.remove(i);
        } else {
            self.open.push(key.to_owned());
            self.tree = Some((key.to_owned(), self.tree.as_ref().map_or("device".to_owned(), |(_, t)| t.clone())));
        }
    }

    pub fn retain_bytes(&self) -> usize {
        self.retain_mib.unwrap_or(DEFAULT_RETAIN_MIB) as usize * 1024 * 1024
    }

    pub fn retain_events(&self) -> usize {
        self.retain_events.unwrap_or(DEFAULT_RETAIN_EVENTS)
    }

    pub fn intake_bytes(&self) -> usize {
        self.intake_mib.unwrap_or(DEFAULT_INTAKE_MIB) as usize * 1024 * 1024
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_mib.unwrap_or(DEFAULT_MAX_FRAME_MIB) as usize * 1024 * 1024
    }

    /// How many engine workers to run.
    pub fn engines(&self) -> u32 {
        self.engines.unwrap_or(DEFAULT_ENGINES).clamp(1, MAX_ENGINES)
    }

    pub fn lanes_side(&self) -> Side {
        self.lanes.unwrap_or(Side::B)
    }

    pub fn trees_side(&self) -> Side {
        self.trees.unwrap_or(Side::B)
    }

    /// Reads a query string (with or without the leading `?`). Unknown keys are ignored and
    /// malformed values fall back to the default, so an old link never breaks the page.
    pub fn from_query(query: &str) -> Settings {
        let mut s = Settings::default();
        for pair in query.trim_start_matches('?').split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v);
            match k {
                "a" if !v.is_empty() => s.policy_a = Some(v),
                "b" if !v.is_empty() => s.policy_b = Some(v),
                "bs" => s.block_size = v.parse().ok().filter(|&n| n > 0),
                "lanes" => s.lanes = Side::parse(&v),
                "trees" => s.trees = Side::parse(&v),
                "worker" => s.worker_filter = v,
                "open" => s.open = v.split(',').filter(|k| !k.is_empty()).map(str::to_owned).collect(),
                "tier" if !v.is_empty() => s.tier_filter = Some(v),
                "tree" => s.tree = v.split_once('@').map(|(src, tier)| (src.to_owned(), tier.to_owned())),
                "hash" => s.hash = v,
                "ev" => s.selected = EventRef::parse(&v),
                "mem" => s.retain_mib = v.parse().ok().filter(|&n| n > 0),
                "events" => s.retain_events = v.parse().ok().filter(|&n| n > 0),
                "indexnodes" => s.index_nodes = v.parse().ok().filter(|&n| n > 0),
                "intake" => s.intake_mib = v.parse().ok().filter(|&n| n > 0),
                "maxframe" => s.max_frame_mib = v.parse().ok().filter(|&n| n > 0),
                "t" => {
                    s.window_ms = v.split_once('-').and_then(|(a, b)| {
                        let (a, b) = (a.parse::<f64>().ok()?, b.parse::<f64>().ok()?);
                        (a.is_finite() && b.is_finite() && b > a).then_some((a, b))
                    })
                }
                "ws" if !v.is_empty() => s.ws = Some(v),
                "show" => s.show_all = v == "all",
                "offline" => s.offline = v != "0",
                "engines" => s.engines = v.parse().ok().filter(|&n| n > 0),
                _ => {}
            }
        }
        s
    }

    /// The query string for these settings (without `?`); defaults are left out so links stay
    /// short.
    pub fn to_query(&self) -> String {
        let mut q = String::new();
        let mut put = |k: &str, v: &str| {
            if !q.is_empty() {
                q.push('&');
            }
            let _ = write!(q, "{k}={}", percent_encode(v));
        };
        if let Some(v) = &self.policy_a {
            put("a", v);
        }
        if let Some(v) = &self.policy_b {
            put("b", v);
        }
        if let Some(v) = self.block_size {
            put("bs", &v.to_string());
        }
        if let Some(v) = self.lanes {
            put("lanes", v.as_str());
        }
        if let Some(v) = self.trees {
            put("trees", v.as_str());
        }
        if !self.worker_filter.is_empty() {
            put("worker", &self.worker_filter);
        }
        if !self.open.is_empty() {
            put("open", &self.open.join(","));
        }
        if let Some(v) = &self.tier_filter {
            put("tier", v);
        }
        if let Some((src, tier)) = &self.tree {
            put("tree", &format!("{src}@{tier}"));
        }
        if !self.hash.is_empty() {
            put("hash", &self.hash);
        }
        if let Some(v) = &self.selected {
            put("ev", &v.to_param());
        }
        if let Some(v) = self.retain_mib {
            put("mem", &v.to_string());
        }
        if let Some(v) = self.intake_mib {
            put("intake", &v.to_string());
        }
        if let Some(v) = self.retain_events {
            put("events", &v.to_string());
        }
        if let Some(v) = self.index_nodes {
            put("indexnodes", &v.to_string());
        }
        if let Some(v) = self.max_frame_mib {
            put("maxframe", &v.to_string());
        }
        if let Some((a, b)) = self.window_ms {
            put("t", &format!("{}-{}", a.round(), b.round()));
        }
        if let Some(v) = &self.ws {
            put("ws", v);
        }
        if self.show_all {
            put("show", "all");
        }
        if self.offline {
            put("offline", "1");
        }
        if let Some(v) = self.engines {
            put("engines", &v.to_string());
        }
        q
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b'/' | b'@' => out.push(b as char),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_the_query_string() {
        let s = Settings {
            policy_a: Some("dynamo-1.6.1".into()),
            policy_b: Some("fixed".into()),
            block_size: Some(12288),
            lanes: Some(Side::A),
            trees: Some(Side::A),
            worker_filter: "w 1".into(),
            open: vec!["w0:0".into(), "12:3".into()],
            tier_filter: Some("host_pinned".into()),
            tree: Some(("w0:0".into(), "device".into())),
            hash: "00ff".into(),
            selected: Some(EventRef { source: "w0:0".into(), seq: 17, index: 3 }),
            retain_mib: Some(64),
            retain_events: Some(1000),
            index_nodes: Some(50_000),
            intake_mib: Some(512),
            max_frame_mib: Some(32),
            window_ms: Some((10.0, 2000.0)),
            ws: Some("ws://127.0.0.1:9/ws?token=a&b".into()),
            offline: true,
            show_all: true,
            engines: Some(2),
        };
        let q = s.to_query();
        assert_eq!(Settings::from_query(&format!("?{q}")), s, "{q}");
    }

    #[test]
    fn defaults_leave_the_query_empty_and_bad_values_fall_back() {
        assert_eq!(Settings::default().to_query(), "");
        let s = Settings::from_query("bs=abc&lanes=x&ev=nope&mem=0&events=0&t=5-1&zzz=1&engines=0");
        assert_eq!(s, Settings::default());
        assert_eq!(Settings::from_query("engines=99").engines(), MAX_ENGINES, "at most {MAX_ENGINES} engine workers");
    }

    #[test]
    fn an_event_ref_keeps_slashes_in_the_source_key() {
        let r = EventRef::parse("w/0:1/42/7").unwrap();
        assert_eq!(r, EventRef { source: "w/0:1".into(), seq: 42, index: 7 });
    }
}
