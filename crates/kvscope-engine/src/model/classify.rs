//! Classification: each frame decoded and run through both policies as it decodes
//! ([`BothPolicies`]), and re-classification of the retained frames when the config changes.

use kvscope_normalize::{Outcome, Policy, StorageTier};
use kvscope_protocol as proto;
use kvscope_wire::{Decoded, KvEvent};

use super::classes::ClassCode;
use super::policy_run::{BothPolicies, Classified, PolicyRun};
use super::rate::RateMeter;
use super::{Config, Difference, EventRecord, FrameBody, IndexerExit, Model, RetainedFrame, Source};

impl Model {
    /// Decodes a frame and runs both policies over it; records verdicts, marks and log lines.
    /// Returns the number of events.
    ///
    /// Events are classified as the decoder hands them over (`decode_each`), so a frame costs
    /// O(1) memory beyond what is retained per event: a hostile batch of millions of tiny
    /// events never builds a `Vec` of decoded events or of verdicts.
    ///
    /// `decoded` is the frame's payload decoded once, for the router's side and index too.
    pub(super) fn classify_frame(&mut self, frame: &mut RetainedFrame, decoded: &Decoded) -> usize {
        let Some(payload) = frame.payload() else { return 0 };
        let source = frame.source;
        let t0 = self.t0_nanos.unwrap_or(frame.recv_time_nanos);
        let time_ms = frame.recv_time_nanos.saturating_sub(t0) as f64 / 1e6;
        let (worker_id, dp_rank, block_size) = {
            let s = &self.sources[source as usize];
            (s.worker_id.clone(), s.dp_rank, s.block_size)
        };
        // The timeline's origin is the first frame with a payload, whether or not it decodes:
        // a shard that only counts another shard's frames past knows no more than that.
        self.t0_nanos = Some(t0);
        let verdicts = [std::cell::Cell::new(None), std::cell::Cell::new(None)];
        let Model { runs, classes, sources, trees, events, media, lanes, differences, next_event_id, exits, .. } = self;
        let recv_time_nanos = frame.recv_time_nanos;
        let [run_a, run_b] = runs;
        let seq = frame.seq;
        let mut n = 0usize;
        let mut sink = BothPolicies {
            a: run_a.sink(source, &worker_id, dp_rank, block_size, seq, &verdicts[0]),
            b: run_b.sink(source, &worker_id, dp_rank, block_size, seq, &verdicts[1]),
            ts: 0.0,
            each: |i: u32, event: &KvEvent, ts: f64| {
                n += 1;
                sources[source as usize].wire.record(event);
                let mut codes = [0 as ClassCode; 2];
                let event_id = *next_event_id;
                for side in 0..2 {
                    let Some(verdict) = verdicts[side].take() else { continue };
                    let outcome = Classified::from_verdict(verdict);
                    let code = classes.intern(outcome.class);
                    codes[side] = code;
                    let counts = &mut sources[source as usize].counts[side];
                    counts.events += 1;
                    *counts.by_class.entry(code).or_default() += 1;
                    let fatal = outcome.class.kind == Outcome::Fatal;
                    if fatal && counts.first_fatal.is_none() {
                        counts.first_fatal = Some((seq, outcome.rule()));
                    }
                    // The exit this shard holds may be another shard's, adopted from a stretch
                    // of the stream it has not read yet: an event counts only once past it.
                    // (At the same position the exit is this frame's, so its ids are ours.)
                    let exit_at = exits[side].as_ref().map(|e| (e.position, e.event_id));
                    if exit_at.is_some_and(|at| at < (frame.position, event_id)) {
                        counts.after_exit += 1;
                        counts.fatal_after_exit += u64::from(fatal);
                    } else if fatal {
                        // The first fatal, or one before the exit adopted from further on.
                        exits[side] = Some(IndexerExit {
                            position: frame.position,
                            event_id,
                            source,
                            seq,
                            recv_time_nanos,
                            label: outcome.verdict.label(),
                            sentence: outcome.rule(),
                        });
                    }
                    if outcome.blocks > 0
                        && let Some(t) = outcome.verdict.tier.map(StorageTier::label)
                    {
                        *counts.blocks_applied.entry(t).or_default() += u64::from(outcome.blocks);
                    }
                    trees[side].apply(source, event, &outcome, ts, event_id);
                }
                if codes[0] != codes[1] {
                    differences
                        .entry((codes[0], codes[1]))
                        .or_insert(Difference { events: 0, first_event: event_id, first_position: frame.position })
                        .events += 1;
                }
                *next_event_id += 1;
                let medium = media.intern(event.medium());
                events.push(EventRecord::of(event, recv_time_nanos, seq, source, i, codes, medium));
                lanes[source as usize].push(time_ms, codes[0], codes[1], event_id, classes);
            },
        };
        if let Err(e) = decoded.feed(payload, &mut sink) {
            let src = &mut self.sources[source as usize];
            src.decode_errors += 1;
            let text = format!("{} seq {}: {e}", src.key, frame.seq);
            src.last_error = Some(text.clone());
            frame.decode_error = Some(text);
            return 0;
        }
        self.last_nanos = self.last_nanos.max(frame.recv_time_nanos);
        frame.num_events = n as u32;
        n
    }

    /// Changes what classification depends on and re-classifies every retained frame.
    /// Counters then cover the retained frames only ([`Model::bound_reached`] says whether
    /// that is all of them).
    pub fn reconfigure(&mut self, config: Config) {
        if config == self.config {
            return;
        }
        if (Config { trees: self.config.trees, ..config.clone() }) == self.config {
            // Both policies' trees are built; choosing whose to show re-classifies nothing.
            self.config.trees = config.trees;
            self.dirty = true;
            return;
        }
        let frames = std::mem::take(&mut self.frames);
        let lag_losses = std::mem::take(&mut self.lag_losses);
        let sources: Vec<proto::SourceInfo> = self.sources.iter().map(Source::info).collect();
        let statuses: Vec<Option<proto::SourceStatus>> = self.sources.iter().map(|s| s.status.clone()).collect();
        let origin = self.origin.clone();
        let (recording, discovery) = (self.recording.take(), self.discovery.take());
        let lagged_per_source: Vec<u64> = self.sources.iter().map(|s| s.lagged_frames).collect();
        let uncounted = self.evicted_frames;
        let intake_dropped = self.intake_dropped_messages;
        let capture = (std::mem::take(&mut self.capture_spans), self.capture_spans_sorted, self.capture_file_kept);
        let (evicted, bound, lagged, hist_evicted, hist_complete) =
            (self.evicted_frames, self.bound_reached, self.lagged_frames, self.history_evicted_frames, self.history_complete);
        let catching_up = (self.history_expected, self.history_received);
        let position = self.next_position;
        self.config = config;
        self.reset_with_sources(&sources);
        self.origin = origin;
        (self.recording, self.discovery) = (recording, discovery);
        for ((src, status), lagged) in self.sources.iter_mut().zip(statuses).zip(lagged_per_source) {
            src.status = status;
            src.lagged_frames = lagged;
        }
        // Losses before the first retained frame fell in what retention evicted: the rebuilt
        // index starts after them, as one that joined late.
        let first = frames.iter().next().map_or(u64::MAX, |f| f.position);
        let mut told = lag_losses.iter().take_while(|l| l.position <= first).count();
        for f in frames {
            // The router index learns again, in stream order, which frames kvscope lost.
            while let Some(loss) = lag_losses.get(told).filter(|l| l.position <= f.position) {
                self.note_lag_loss(loss);
                told += 1;
            }
            // Each frame keeps its place in the stream: other shards' frames between are gone.
            self.next_position = f.position;
            match f.body {
                FrameBody::Message { topic, payload } => {
                    self.apply_frame(f.source, f.seq, f.recv_time_nanos, f.replayed, topic, payload, 0.0)
                }
                FrameBody::Malformed { frames, error } => self.apply_malformed(f.source, f.recv_time_nanos, f.replayed, frames, error),
                FrameBody::Plane { frames } => self.apply_plane_frames(f.source, f.recv_time_nanos, frames),
                FrameBody::IndexOnly { payload } => self.index_foreign(f.source, f.seq, f.recv_time_nanos, f.replayed, payload),
            }
        }
        lag_losses.iter().skip(told).for_each(|loss| self.note_lag_loss(loss));
        self.lag_losses = lag_losses;
        self.next_position = position;
        self.rate = RateMeter::default();
        self.evicted_frames += evicted;
        self.bound_reached |= bound;
        self.lagged_frames = lagged;
        // Frames evicted before now were counted once and are not any more.
        self.uncounted_frames = uncounted;
        self.history_evicted_frames = hist_evicted;
        self.intake_dropped_messages = intake_dropped;
        (self.capture_spans, self.capture_spans_sorted, self.capture_file_kept) = capture;
        self.history_complete = hist_complete;
        (self.history_expected, self.history_received) = catching_up;
    }
}

/// The runs of the two policies `config` names; an unknown name falls back to its side's default
/// preset, and the error says which.
pub(super) fn make_runs(config: &Config) -> ([PolicyRun; 2], Option<String>) {
    let mut error = None;
    let mut make = |name: &str, fallback: Policy| match PolicyRun::new(name, config.block_size) {
        Ok(r) => r,
        Err(e) => {
            error = Some(e);
            PolicyRun::of(fallback, config.block_size)
        }
    };
    // The presets settings::DEFAULT_POLICY_A and _B name (a test checks they agree).
    let a = make(&config.policy_a, Policy::LEGACY);
    let b = make(&config.policy_b, Policy::FIXED);
    ([a, b], error)
}
