//! The coordinator's rounds, without I/O. A flush asks every shard to report; merges the
//! reports, hands every shard the fleet's exits, opens the first finding and lays the timeline
//! out; asks every shard to paint its lanes (and draw the trees, build the inspector, search a
//! hash); asks the shards that model an index the questions those raise; then puts the summary
//! together. A request from the page goes to the shard that can answer it. The host delivers
//! each [`Out`] and hands the shards' answers back ([`Coordinator::on_shard`]).

use std::collections::HashMap;

use kvscope_engine_protocol::view::{CaptureProgress, ConnState, Overview, Selection};
use kvscope_engine_protocol::{EventRef, Severity, Side, Summary, ViewQuery};

use super::protocol::{Answers, FromShard, Painted, ToShard};
use super::{FleetParts, ShardReport};
use crate::model::StreamOrder;
use crate::model::intake::IntakeStatus;
use crate::model::shard::{self, Shard};
use crate::summarize::timeline::Layout;
use crate::summarize::{EdgeState, Sent, TimelineImage, trees};

/// What the coordinator sends.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    /// A message for shard `.0`.
    Shard(u32, ToShard),
    /// A summary for the page, with the timeline's pixels when they changed.
    Summary(Box<Summary>, Option<TimelineImage>),
    /// The answer to the page's hover.
    Hover(String),
}

/// Where a flush is.
#[derive(Debug, Default)]
enum Round {
    #[default]
    Idle,
    /// Each shard's answer: its report, or `None` when it said nothing changed.
    Reports {
        force: bool,
        got: Vec<Option<Option<ShardReport>>>,
    },
    Painting {
        force: bool,
        reports: Vec<ShardReport>,
        fleet: Box<FleetParts>,
        layout: Layout,
        got: Vec<Option<Painted>>,
    },
    Asking {
        force: bool,
        reports: Vec<ShardReport>,
        fleet: Box<FleetParts>,
        layout: Layout,
        painted: Vec<Painted>,
        got: Vec<Option<Answers>>,
    },
}

/// The fleet's side of a page whose engine is spread over `count` shards.
#[derive(Debug)]
pub struct Coordinator {
    count: u32,
    query: ViewQuery,
    selection: Option<u64>,
    /// The selected event by name, and where it sits in the stream.
    selected: Option<(EventRef, Option<StreamOrder>)>,
    /// The event to find again at the next report: a re-classification numbers events anew.
    refind: Option<EventRef>,
    /// The first finding was opened once: never again by itself.
    opened_first: bool,
    sent: Sent,
    last_pixels: Option<TimelineImage>,
    seq: u64,
    edges: EdgeState,
    /// Which shard reads each source, from the last reports.
    readers: HashMap<u32, u32>,
    /// Each shard's last report: a shard that says nothing changed is shown from it.
    last_reports: Vec<Option<ShardReport>>,
    /// What the coordinator itself shows changed (the view, the selection, the socket, the
    /// capture): the next flush makes a summary though no shard changed.
    changed: bool,
    round: Round,
    /// The shards' answers to "the next marked event", while they come.
    next: Option<Vec<Option<FromShard>>>,
    /// Something the page asked for changed: the host should flush.
    flush_wanted: bool,
}

impl Coordinator {
    pub fn new(count: u32, query: ViewQuery) -> Coordinator {
        Coordinator {
            count: count.max(1),
            query,
            selection: None,
            selected: None,
            refind: None,
            opened_first: false,
            sent: Sent::default(),
            last_pixels: None,
            seq: 0,
            edges: EdgeState::default(),
            readers: HashMap::new(),
            last_reports: vec![None; count.max(1) as usize],
            changed: true,
            round: Round::Idle,
            next: None,
            flush_wanted: false,
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn query(&self) -> &ViewQuery {
        &self.query
    }

    pub fn selection(&self) -> Option<u64> {
        self.selection
    }

    /// The socket's state changed: the fleet bar says so at the next summary.
    pub fn set_conn(&mut self, state: ConnState) {
        self.edges.conn = state;
        self.changed = true;
    }

    /// Opening a capture went on: the fleet bar says how far at the next summary.
    pub fn set_capture(&mut self, progress: CaptureProgress) {
        self.edges.capture = progress;
        self.changed = true;
    }

    /// What the intake holds and the engine's memory: shown with the next summary, not a
    /// reason for one.
    pub fn note_resources(&mut self, intake: IntakeStatus, wasm_bytes: u64) {
        self.edges.intake = intake;
        self.edges.wasm_bytes = wasm_bytes;
    }

    /// How often summaries go now, for the fleet bar.
    pub fn note_pace(&mut self, pace: &crate::pace::Pace) {
        self.edges.pace = pace.note();
    }

    /// Whether a request of the page changed what it shows (the host flushes soon), once.
    pub fn take_flush_wanted(&mut self) -> bool {
        std::mem::take(&mut self.flush_wanted)
    }

    fn to_all(&self, message: &ToShard) -> Vec<Out> {
        (0..self.count).map(|i| Out::Shard(i, message.clone())).collect()
    }

    /// What the page shows now: every shard hears it. When it classifies anew, the selected
    /// event is found again by name at the next report.
    pub fn set_view(&mut self, query: ViewQuery) -> Vec<Out> {
        if query == self.query {
            return Vec::new();
        }
        let config = |q: &ViewQuery| crate::engine::config_from(&q.settings, None, Shard::ALL);
        if config(&query) != config(&self.query) {
            if let Some((named, _)) = self.selected.take() {
                self.refind = Some(named);
            }
            self.selection = None;
        }
        self.query = query;
        (self.changed, self.flush_wanted) = (true, true);
        self.to_all(&ToShard::View(Box::new(self.query.clone())))
    }

    /// The stream started over (a hello, a capture's header): event ids mean other events.
    pub fn started_over(&mut self) {
        self.selection = None;
        self.selected = None;
        self.refind = None;
        self.changed = true;
    }

    /// Opens an event in the inspector (`None` closes it).
    pub fn select(&mut self, id: Option<u64>) {
        self.selection = id;
        self.selected = None;
        self.refind = None;
        // An explicit choice: nothing opens by itself over it.
        self.opened_first = true;
        (self.changed, self.flush_wanted) = (true, true);
    }

    /// Asks every shard for the next event marked at `min_severity` or more after the selected
    /// one in the stream (wrapping around).
    pub fn select_next(&mut self, min_severity: Severity) -> Vec<Out> {
        self.next = Some(vec![None; self.count as usize]);
        let after = self.selected.as_ref().and_then(|(_, at)| *at);
        self.to_all(&ToShard::NextMarked { after, min_severity })
    }

    /// The shard that reads `source` (shard 0 before any report).
    fn reader(&self, source: u32) -> u32 {
        self.readers.get(&source).copied().unwrap_or(0)
    }

    /// Asks the shard that reads `source` what its lane holds between two times.
    pub fn hover(&self, source: u32, side: Side, from_ms: f64, to_ms: f64) -> Vec<Out> {
        vec![Out::Shard(self.reader(source), ToShard::Hover { source, side, from_ms, to_ms })]
    }

    /// Asks the shard that reads `source` which marked event a click on its lane opens.
    pub fn select_at(&self, source: u32, side: Side, time_ms: f64, tolerance_ms: f64) -> Vec<Out> {
        vec![Out::Shard(self.reader(source), ToShard::Pick { source, side, time_ms, tolerance_ms })]
    }

    /// Starts a flush (`force`: a summary even if nothing changed); nothing while a round is
    /// under way (the host asks again once it is over, [`Coordinator::flushing`]).
    pub fn flush(&mut self, force: bool) -> Vec<Out> {
        if self.flushing() {
            return Vec::new();
        }
        self.round = Round::Reports { force, got: vec![None; self.count as usize] };
        let find = match (&self.selection, &self.query.settings.selected) {
            (None, Some(named)) => Some(named.clone()),
            (None, None) => self.refind.clone(),
            (Some(_), _) => None,
        };
        // A forced summary, and a shard whose report the coordinator lacks, report changed or not.
        (0..self.count)
            .map(|i| Out::Shard(i, ToShard::Report { find: find.clone(), force: force || self.last_reports[i as usize].is_none() }))
            .collect()
    }

    /// Whether a flush is under way.
    pub fn flushing(&self) -> bool {
        !matches!(self.round, Round::Idle)
    }

    /// One shard's answer.
    pub fn on_shard(&mut self, shard: u32, message: FromShard) -> Vec<Out> {
        let i = shard as usize;
        match (message, &mut self.round) {
            (FromShard::Report(r), Round::Reports { got, .. }) if i < got.len() => {
                got[i] = Some(Some(*r));
                if got.iter().all(Option::is_some) { self.after_reports() } else { Vec::new() }
            }
            (FromShard::Unchanged, Round::Reports { got, .. }) if i < got.len() => {
                got[i] = Some(None);
                if got.iter().all(Option::is_some) { self.after_reports() } else { Vec::new() }
            }
            (FromShard::Painted(p), Round::Painting { got, .. }) if i < got.len() => {
                got[i] = Some(*p);
                if got.iter().all(Option::is_some) { self.after_painting() } else { Vec::new() }
            }
            (FromShard::Answered(a), Round::Asking { got, .. }) if i < got.len() => {
                got[i] = Some(a);
                if got.iter().all(Option::is_some) { self.after_asking() } else { Vec::new() }
            }
            (FromShard::Hover(text), _) => vec![Out::Hover(text)],
            (FromShard::Picked(Some(id)), _) => {
                self.select(Some(id));
                Vec::new()
            }
            (next @ FromShard::Next { .. }, _) => {
                if let Some(got) = self.next.as_mut().filter(|g| i < g.len()) {
                    got[i] = Some(next);
                }
                self.after_next();
                Vec::new()
            }
            // An answer of a round that is over (the page re-joined, the fleet restarted).
            _ => Vec::new(),
        }
    }

    /// Every shard said where its next marked event is: the earliest after the selected one
    /// in the stream, else the earliest of all.
    fn after_next(&mut self) {
        let Some(got) = &self.next else { return };
        if got.iter().any(Option::is_none) {
            return;
        }
        let (mut after, mut first) = (Vec::new(), Vec::new());
        for answer in got.iter().flatten() {
            if let FromShard::Next { after: a, first: f } = answer {
                after.extend(*a);
                first.extend(*f);
            }
        }
        self.next = None;
        let pick = after.into_iter().min().or_else(|| first.into_iter().min());
        self.select(pick.map(|(_, id)| id));
    }

    fn after_reports(&mut self) -> Vec<Out> {
        let Round::Reports { force, got } = std::mem::take(&mut self.round) else { return Vec::new() };
        let any_new = got.iter().any(|r| matches!(r, Some(Some(_))));
        for (last, new) in self.last_reports.iter_mut().zip(got) {
            if let Some(Some(r)) = new {
                *last = Some(r);
            }
        }
        let changed = std::mem::take(&mut self.changed);
        if !(any_new || force || changed) {
            // Nothing changed anywhere: no summary.
            return Vec::new();
        }
        // Every shard has a report now (one without was asked to report, changed or not); they
        // come back to `last_reports` when the round ends.
        let reports: Vec<ShardReport> = self.last_reports.iter_mut().filter_map(Option::take).collect();
        self.readers = reports.iter().enumerate().flat_map(|(i, r)| r.own_sources.iter().map(move |s| (*s, i as u32))).collect();
        let fleet = Box::new(super::merge(&reports, &self.edges));
        let mut out = Vec::new();
        // Every shard takes the fleet's exit: its events after it were never indexed.
        let exits = super::fleet_exits(&reports);
        let at = |e: &[Option<crate::model::IndexerExit>; 2]| e.clone().map(|x| x.map(|x| x.position));
        for (i, r) in reports.iter().enumerate() {
            if at(&r.exits) != at(&exits) {
                out.push(Out::Shard(i as u32, ToShard::AdoptExits(Box::new(exits.clone()))));
            }
        }
        self.resolve_selection(&reports, &fleet);
        let layout = super::timeline_layout(&reports, &fleet.rows, &self.query);
        let paint = ToShard::Paint { layout: Box::new(layout.clone()), selected: self.selection };
        out.extend(self.to_all(&paint));
        self.round = Round::Painting { force, reports, fleet, layout, got: vec![None; self.count as usize] };
        out
    }

    /// Opens the event a shared link names once a shard found it, else, once per page, the
    /// event an operator looks at first: where a policy's indexer exits, else the first event
    /// the policies decide differently.
    fn resolve_selection(&mut self, reports: &[ShardReport], fleet: &FleetParts) {
        if self.selection.is_some() {
            return;
        }
        if self.query.settings.selected.is_some() || self.refind.is_some() {
            self.selection = reports.iter().find_map(|r| r.found);
            if self.selection.is_some() {
                self.refind = None;
            }
            return;
        }
        if self.opened_first {
            return;
        }
        let f = &fleet.facts;
        let exit = f.sides.iter().find_map(|s| s.exit.as_ref().map(|e| e.event_id));
        let first = exit.or_else(|| f.differences.iter().min_by_key(|d| (d.first_position, d.first_event)).map(|d| d.first_event));
        if first.is_some() {
            self.selection = first;
            self.opened_first = true;
        }
    }

    fn after_painting(&mut self) -> Vec<Out> {
        let Round::Painting { force, reports, fleet, layout, got } = std::mem::take(&mut self.round) else { return Vec::new() };
        let painted: Vec<Painted> = got.into_iter().flatten().collect();
        let lacks = painted.iter().find_map(|p| p.tree.as_ref()?.lacks_query().cloned());
        let index = painted.iter().find_map(|p| p.inspector.as_ref()?.index_query.clone());
        if lacks.is_none() && index.is_none() {
            return self.finish(force, reports, &fleet, &layout, &painted, &[]);
        }
        // Only the shards that model an index answer; the others' answers are empty.
        let ask = ToShard::Ask { lacks, index };
        let askers: Vec<u32> =
            (0..self.count).filter(|&i| shard::index_sides(Shard { index: i, count: self.count }).contains(&true)).collect();
        let mut got = vec![Some(Answers::default()); self.count as usize];
        for &i in &askers {
            got[i as usize] = None;
        }
        self.round = Round::Asking { force, reports, fleet, layout, painted, got };
        askers.into_iter().map(|i| Out::Shard(i, ask.clone())).collect()
    }

    fn after_asking(&mut self) -> Vec<Out> {
        let Round::Asking { force, reports, fleet, layout, painted, got } = std::mem::take(&mut self.round) else { return Vec::new() };
        let answers: Vec<Answers> = got.into_iter().flatten().collect();
        self.finish(force, reports, &fleet, &layout, &painted, &answers)
    }

    /// The summary from every shard's report, paint and answers: only the parts that changed.
    fn finish(
        &mut self,
        force: bool,
        reports: Vec<ShardReport>,
        fleet: &FleetParts,
        layout: &Layout,
        painted: &[Painted],
        answers: &[Answers],
    ) -> Vec<Out> {
        let settings = &self.query.settings;
        let lanes: Vec<_> = painted.iter().map(|p| p.lanes.clone()).collect();
        let (timeline, image) = super::timeline(layout, &reports, &lanes, &fleet.rows, settings);
        let lacks: Vec<(u64, String)> = answers.iter().flat_map(|a| a.lacks.iter().cloned()).collect();
        let hits = painted.iter().flat_map(|p| p.hits.iter().cloned()).collect();
        let tree = painted.iter().find_map(|p| p.tree.clone()).unwrap_or_default();
        let trees = trees::assemble(tree, &lacks, hits, &settings.hash);
        let lines: Vec<(Side, String)> = answers.iter().flat_map(|a| a.index_lines.iter().cloned()).collect();
        let inspector = painted.iter().find(|p| p.inspector.is_some()).and_then(|p| p.inspector_with(lines));
        self.selected = painted.iter().find_map(|p| p.selected.clone());
        let selection = Selection { id: self.selection, event: self.selected.as_ref().map(|(r, _)| r.clone()) };
        let first = reports.first();
        let sent = &mut self.sent;
        let summary = Summary {
            seq: self.seq + 1,
            meta: first.and_then(|r| r.meta.clone()).and_then(|meta| sent.changed("meta", meta)),
            bar: sent.changed("bar", fleet.bar.clone()),
            quality: sent.changed("quality", fleet.quality.clone()),
            headline: sent.changed("headline", fleet.headline.clone()),
            overview: sent.changed("overview", Overview { rows: fleet.rows.clone() }),
            cards: sent.changed("cards", fleet.cards.clone()),
            planes: first.and_then(|r| sent.changed("planes", r.planes.clone())),
            timeline: sent.changed("timeline", timeline),
            inspector: sent.changed("inspector", inspector),
            logs: sent.changed("logs", fleet.logs.clone()),
            trees: sent.changed("trees", trees),
            selection: sent.changed("selection", selection),
            answers: Vec::new(),
        };
        let pixels = image.filter(|image| self.last_pixels.as_ref() != Some(image));
        if let Some(p) = &pixels {
            self.last_pixels = Some(p.clone());
        }
        self.last_reports = reports.into_iter().map(Some).collect();
        let empty = summary == Summary { seq: summary.seq, ..Summary::default() };
        if empty && pixels.is_none() && !force {
            return Vec::new();
        }
        self.seq = summary.seq;
        vec![Out::Summary(Box::new(summary), pixels)]
    }

    /// The page (re)joined: the next summary carries every part.
    pub fn resend_all(&mut self) {
        self.sent.clear();
        self.last_pixels = None;
        (self.changed, self.flush_wanted) = (true, true);
    }
}
