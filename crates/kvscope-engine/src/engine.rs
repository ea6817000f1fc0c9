//! [`Engine`]: one engine worker's model of its shard of the fleet (all of it, in a page of
//! one engine) and the settings it is classified by. It applies what the server and captures
//! deliver and answers the coordinator ([`Engine::answer`](crate::coordinator::answer)); what
//! the page shows, the selection and what was last sent are the coordinator's
//! ([`crate::coordinator::Coordinator`]). Plain Rust, tested natively: the I/O around it is
//! `crate::host`'s.

use kvscope_engine_protocol::{Settings, Side, ViewQuery};
use kvscope_protocol as proto;

use crate::model::shard::Shard;
use crate::model::{Config, Model};
use crate::summarize::{self, InspectorCache, InspectorPart};

/// The model configuration the settings ask for; what they leave open comes from the server's
/// defaults, then from [`Config::default`].
pub fn config_from(settings: &Settings, server: Option<&proto::Defaults>, shard: Shard) -> Config {
    let d = Config::default();
    Config {
        policy_a: settings.policy_a.clone().or_else(|| server.map(|s| s.policy_a.clone())).unwrap_or(d.policy_a),
        policy_b: settings.policy_b.clone().or_else(|| server.map(|s| s.policy_b.clone())).unwrap_or(d.policy_b),
        block_size: settings.block_size.or(server.map(|s| s.block_size)).unwrap_or(d.block_size),
        // Not a page setting: the page predicts the relay the server predicts, so its router
        // rows and /metrics agree.
        relay_policy: server.map(|s| s.relay_policy.clone()).unwrap_or(d.relay_policy),
        trees: settings.trees_side(),
        retain_bytes: settings.retain_bytes(),
        retain_events: settings.retain_events(),
        // The server's bound, so that the page's index figures and /metrics' agree.
        index_nodes: settings.index_nodes.or(server.and_then(|s| s.index_max_nodes).map(|n| n as usize)).unwrap_or(d.index_nodes),
        max_frame_bytes: settings.max_frame_bytes(),
        shard,
    }
}

/// One engine worker's state.
#[derive(Debug)]
pub struct Engine {
    model: Model,
    query: ViewQuery,
    /// Bumped by every re-classification and hello: event ids before it mean other events.
    epoch: u64,
    /// What the page shows or the model's start changed since the last report.
    view_changed: bool,
    inspector: InspectorCache,
    /// This worker's intake holds messages not yet applied (for "behind live").
    waiting: bool,
}

impl Engine {
    pub fn new(settings: Settings) -> Engine {
        Engine::shard(settings, Shard::ALL)
    }

    /// An engine that reads one shard of the fleet ([`crate::model::shard`]).
    pub fn shard(settings: Settings, shard: Shard) -> Engine {
        let model = Model::new(config_from(&settings, None, shard));
        Engine {
            model,
            query: ViewQuery { settings, ..ViewQuery::default() },
            epoch: 0,
            view_changed: true,
            inspector: InspectorCache::default(),
            waiting: false,
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Changes the model; the next report will look for what changed.
    pub fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    pub fn query(&self) -> &ViewQuery {
        &self.query
    }

    pub fn settings(&self) -> &Settings {
        &self.query.settings
    }

    /// Whether this worker's intake holds messages not yet applied (a change is one for the
    /// fleet bar: behind live, or not).
    pub fn set_waiting(&mut self, waiting: bool) {
        self.view_changed |= self.waiting != waiting;
        self.waiting = waiting;
    }

    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Whether anything changed since the last report (and forgets it): the model's data, what
    /// the page shows, or the model's start.
    pub fn take_changed(&mut self) -> bool {
        let (global, changed) = self.model.take_dirty();
        std::mem::take(&mut self.view_changed) || global || !changed.is_empty()
    }

    /// What the page shows now. Re-classifies retained history when what classification depends
    /// on changed.
    pub fn set_view(&mut self, query: ViewQuery) {
        if query == self.query {
            return;
        }
        let config = config_from(&query.settings, self.model.server_defaults.as_ref(), self.model.shard());
        self.query = query;
        self.view_changed = true;
        self.configure(config);
    }

    fn configure(&mut self, config: Config) {
        if *self.model.config() == config {
            return;
        }
        self.model.reconfigure(config);
        self.epoch += 1;
        self.model.dirty = true;
    }

    /// Applies one message from the server (magic, version, msgpack body). After a hello the
    /// model is re-configured with the server's defaults wherever the settings leave them open,
    /// before the messages that follow it. True when the model started over (its event ids are
    /// new).
    pub fn apply_server_message(&mut self, bytes: &[u8], now_ms: f64) -> bool {
        let started_over = self.model.apply_message_bytes(bytes, now_ms);
        if started_over {
            self.started_over();
        }
        started_over
    }

    /// The model started over (a hello, or a capture's header): its event ids are new.
    pub fn started_over(&mut self) {
        let config = config_from(&self.query.settings, self.model.server_defaults.as_ref(), self.model.shard());
        self.model.reconfigure(config);
        self.epoch += 1;
        self.view_changed = true;
    }

    /// Starts a capture opened in the page: like a hello, from its header, with the block size
    /// of its first Device-tier store where the settings leave it open.
    pub fn begin_capture(&mut self, name: &str, header: &proto::capture::CaptureHeader, inferred_block_size: Option<u32>) {
        self.model.begin_capture(name, header);
        let d = Config::default();
        self.model.server_defaults = Some(proto::Defaults {
            block_size: inferred_block_size.unwrap_or(d.block_size),
            policy_a: d.policy_a,
            policy_b: d.policy_b,
            relay_policy: d.relay_policy,
            index_max_nodes: None,
        });
        self.model.defaults_note =
            inferred_block_size.map(|bs| format!("block size {bs} inferred from the capture's first Device-tier store"));
        self.started_over();
    }

    /// What a lane holds between two times, in words.
    pub fn hover(&self, source: u32, side: Side, from_ms: f64, to_ms: f64) -> String {
        summarize::hover_text(&self.model, source, side, from_ms, to_ms)
    }

    /// The inspector of event `id` as this model builds it (without the index's lines).
    pub fn inspect(&mut self, id: Option<u64>) -> Option<InspectorPart> {
        self.inspector.get(&self.model, id, self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page models the router's index under the server's bound, so that its figures and
    /// `/metrics`' agree; `?indexnodes=` still has the last word, and a capture names no server.
    #[test]
    fn the_index_bound_is_the_server_s_unless_the_page_asks_for_another() {
        let server = proto::Defaults {
            block_size: 16,
            policy_a: "legacy".into(),
            policy_b: "fixed".into(),
            relay_policy: "dynamo-1.6.1".into(),
            index_max_nodes: Some(5_000_000),
        };
        let bound = |settings: &Settings, server: Option<&proto::Defaults>| config_from(settings, server, Shard::ALL).index_nodes;
        assert_eq!(bound(&Settings::default(), Some(&server)), 5_000_000);
        assert_eq!(bound(&Settings { index_nodes: Some(7), ..Settings::default() }, Some(&server)), 7);
        let capture = proto::Defaults { index_max_nodes: None, ..server };
        assert_eq!(bound(&Settings::default(), Some(&capture)), Config::default().index_nodes);
    }
}
