//! Dynamo's event plane as kvscope sources: what the router receives, read-only.
//!
//! In a Dynamo deployment each worker's relay (`KvEventPublisher`) subscribes to its engine's
//! ZMQ stream, runs Dynamo's normalizer and republishes `RouterEvent`s on the cluster's event
//! plane. `--event-plane URL` (repeatable) makes one source of kind `event_plane` per URL:
//! - `nats://HOST:PORT`: a NATS core subscription (never a JetStream consumer: a durable
//!   consumer would hold back the stream's purge) to `namespace.>` by default, keeping the
//!   subjects whose last token is `kv-events`; `--event-plane-subject` narrows it. Credentials
//!   as Dynamo's own clients take them, from `NATS_AUTH_USERNAME` + `NATS_AUTH_PASSWORD`,
//!   `NATS_AUTH_TOKEN`, `NATS_AUTH_NKEY` or `NATS_AUTH_CREDENTIALS_FILE`, in that order
//!   (Dynamo's `lib/runtime/src/transports/nats.rs`), or `nats://user:pass@host` in the URL;
//! - `zmq://HOST:PORT`: a SUB to one publisher of Dynamo's ZMQ plane (it binds a PUB and
//!   advertises it through discovery; 4 frames per message).
//!
//! Each message is relayed as a frame whose topic is the subject (or ZMQ topic) and whose payload
//! is the envelope, recorded and counted like an engine's. Neighbours: [`pipeline`] holds the
//! rules; [`nats`] the NATS connection loop, and [`crate::intake::run_subscribed`] the ZMQ one
//! (the engines' loop). Dynamo's bytes (the ZMQ plane's frames, the
//! envelope, its RouterEvents) are read by `kvscope-router` only; with a live reconciler
//! ([`crate::router`]) each decoded envelope also goes to it.

pub mod nats;
pub mod pipeline;

use kvscope_protocol as proto;

pub use pipeline::PlanePipeline;

/// The subject kvscope subscribes to by default: every namespace (Dynamo's KV-event subjects
/// are `namespace.{ns}.component.{comp}[.endpoint.{ep}].kv-events`).
pub const DEFAULT_SUBJECT: &str = "namespace.>";

/// The last subject token of Dynamo's KV-event subjects.
pub const KV_EVENTS_TOKEN: &str = "kv-events";

/// Which event plane a source reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaneKind {
    /// `nats://...` as given (async-nats takes it, credentials in it included).
    Nats { subject: String },
    /// `tcp://HOST:PORT` of a ZMQ-plane publisher.
    Zmq { endpoint: String },
}

/// One `--event-plane` source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaneSource {
    /// The URL as given.
    pub url: String,
    pub kind: PlaneKind,
}

impl PlaneSource {
    /// Parses `nats://HOST:PORT` or `zmq://HOST:PORT`; `subject` is `--event-plane-subject`.
    pub fn parse(url: &str, subject: Option<&str>) -> Result<PlaneSource, String> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        if rest.is_empty() || rest.contains('/') && !rest.ends_with('/') {
            return Err(format!("--event-plane {url:?}: write nats://HOST:PORT or zmq://HOST:PORT"));
        }
        let rest = rest.trim_end_matches('/');
        match scheme {
            "nats" | "tls" => {
                Ok(PlaneSource { url: url.to_owned(), kind: PlaneKind::Nats { subject: subject.unwrap_or(DEFAULT_SUBJECT).to_owned() } })
            }
            "zmq" | "tcp" => {
                if subject.is_some() {
                    return Err(format!(
                        "--event-plane-subject applies to nats:// event planes; {url:?} is a ZMQ-plane publisher (its topic is not filtered)"
                    ));
                }
                if rest.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()) {
                    return Err(format!(
                        "--event-plane {url:?}: a ZMQ-plane publisher needs HOST:PORT (see Dynamo's discovery record of the event channel)"
                    ));
                }
                Ok(PlaneSource { url: url.to_owned(), kind: PlaneKind::Zmq { endpoint: format!("tcp://{rest}") } })
            }
            _ => Err(format!(
                "--event-plane {url:?}: unknown scheme {scheme:?}; write nats://HOST:PORT (NATS core) or zmq://HOST:PORT (Dynamo's ZMQ plane)"
            )),
        }
    }

    /// `plane:URL`, as logs, metrics and errors name the source (credentials left out).
    pub fn key(&self) -> String {
        proto::plane_key(&redact(&self.url))
    }

    pub fn info(&self, index: u32) -> proto::SourceInfo {
        let subject = match &self.kind {
            PlaneKind::Nats { subject } => Some(subject.clone()),
            PlaneKind::Zmq { .. } => None,
        };
        proto::SourceInfo::event_plane(index, &redact(&self.url), subject)
    }

    /// Rebuilds a source from a capture header's entry (`replay`).
    pub fn from_info(info: &proto::SourceInfo) -> Option<PlaneSource> {
        let plane = info.event_plane.as_ref()?;
        PlaneSource::parse(&plane.url, plane.subject.as_deref().filter(|_| plane.url.starts_with("nats"))).ok()
    }
}

/// The URL without `user:pass@`, for names that end up in logs and on the page.
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Parses every `--event-plane` URL.
pub fn parse_planes(urls: &[String], subject: Option<&str>) -> Result<Vec<PlaneSource>, String> {
    if subject.is_some() && !urls.iter().any(|u| u.starts_with("nats") || u.starts_with("tls")) {
        return Err("--event-plane-subject needs a --event-plane nats://HOST:PORT to narrow".to_owned());
    }
    urls.iter()
        .map(|u| {
            let is_nats = u.starts_with("nats") || u.starts_with("tls");
            PlaneSource::parse(u, subject.filter(|_| is_nats))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_plane_or_say_what_to_write() {
        let n = PlaneSource::parse("nats://u:p@nats.dynamo:4222", None).unwrap();
        assert_eq!(n.kind, PlaneKind::Nats { subject: "namespace.>".into() });
        assert_eq!(n.key(), "plane:nats://nats.dynamo:4222");
        let z = PlaneSource::parse("zmq://127.0.0.1:5600", None).unwrap();
        assert_eq!(z.kind, PlaneKind::Zmq { endpoint: "tcp://127.0.0.1:5600".into() });
        assert_eq!(
            PlaneSource::parse("http://x:1", None).unwrap_err(),
            "--event-plane \"http://x:1\": unknown scheme \"http\"; write nats://HOST:PORT (NATS core) or zmq://HOST:PORT (Dynamo's ZMQ plane)"
        );
        assert!(PlaneSource::parse("zmq://host", None).is_err());
        let narrowed = parse_planes(&["nats://h:4222".into(), "zmq://h:1".into()], Some("namespace.dynamo.>")).unwrap();
        assert_eq!(narrowed[0].kind, PlaneKind::Nats { subject: "namespace.dynamo.>".into() });
        assert!(parse_planes(&["zmq://h:1".into()], Some("x")).is_err());
        let info = n.info(4);
        assert_eq!(PlaneSource::from_info(&info).unwrap().key(), "plane:nats://nats.dynamo:4222");
    }
}
