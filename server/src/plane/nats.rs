//! The NATS event-plane intake: one read-only core subscription per `--event-plane nats://...`.
//!
//! async-nats reconnects by itself once connected, and its subscriptions survive that; kvscope
//! sets the reconnect delay to the engine intake's capped backoff (100 ms doubling to 2 s) with
//! no limit on attempts, and follows the client's `Connected`/`Disconnected` events for the
//! source's state. The first connection is kvscope's own loop (async-nats fails it at once when
//! the server is away), so a NATS server that is down at start is simply retried; the server
//! never exits because the event plane is away.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use kvscope_protocol as proto;
use tokio::sync::{mpsc, watch};

use super::{KV_EVENTS_TOKEN, PlanePipeline};
use crate::intake::{Backoff, IntakeOptions, RelayOutput};
use crate::source_state::TrackedSource;
use crate::time::unix_nanos;

/// The credentials Dynamo's own clients take, in their order of priority.
pub async fn connect_options(opts: &IntakeOptions) -> Result<async_nats::ConnectOptions, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (min, max) = (opts.backoff_min, opts.backoff_max);
    let base = async_nats::ConnectOptions::new()
        .name("kvscope (read-only)")
        .connection_timeout(opts.connect_timeout * 5)
        .max_reconnects(None)
        .reconnect_delay_callback(move |attempts| {
            let factor = 1u32 << attempts.min(16) as u32;
            (min * factor).min(max)
        })
        // kvscope is one subscriber among the router's; its own buffer, not the server's.
        .subscription_capacity(64 * 1024);
    let with_auth = if let (Some(user), Some(pass)) = (env("NATS_AUTH_USERNAME"), env("NATS_AUTH_PASSWORD")) {
        base.user_and_password(user, pass)
    } else if let Some(token) = env("NATS_AUTH_TOKEN") {
        base.token(token)
    } else if let Some(seed) = env("NATS_AUTH_NKEY") {
        base.nkey(seed)
    } else if let Some(path) = env("NATS_AUTH_CREDENTIALS_FILE") {
        base.credentials_file(&path)
            .await
            .map_err(|e| format!("NATS_AUTH_CREDENTIALS_FILE {path:?}: {e}; point it at the .creds file Dynamo's workers use"))?
    } else {
        base
    };
    Ok(with_auth)
}

/// Whether a subject is one of Dynamo's KV-event subjects.
pub fn is_kv_events(subject: &str) -> bool {
    subject.rsplit('.').next() == Some(KV_EVENTS_TOKEN)
}

enum Change {
    Connected,
    Disconnected,
    Problem(String),
}

/// Runs one NATS event-plane source until `shutdown` turns true.
pub async fn run(
    url: String,
    subject: String,
    mut pipeline: PlanePipeline<RelayOutput>,
    opts: IntakeOptions,
    mut shutdown: watch::Receiver<bool>,
) -> PlanePipeline<RelayOutput> {
    let mut backoff = Backoff::new(&opts);
    let shown = pipeline.key.trim_start_matches("plane:").to_owned();
    let (events_tx, mut events) = mpsc::unbounded_channel::<Change>();
    let client = loop {
        if *shutdown.borrow() {
            pipeline.flush_status();
            return pipeline;
        }
        let options = match connect_options(&opts).await {
            Ok(o) => o,
            Err(e) => {
                pipeline.set_state(proto::ConnState::Error, Some(e));
                tokio::select! {
                    _ = tokio::time::sleep(opts.backoff_max) => continue,
                    _ = shutdown.changed() => continue,
                }
            }
        };
        let tx = events_tx.clone();
        let options = options.event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let change = match event {
                    async_nats::Event::Connected => Change::Connected,
                    async_nats::Event::Disconnected => Change::Disconnected,
                    other => Change::Problem(other.to_string()),
                };
                let _ = tx.send(change);
            }
        });
        let attempt = tokio::select! {
            r = options.connect(url.as_str()) => r,
            _ = shutdown.changed() => continue,
        };
        match attempt {
            Ok(client) => break client,
            Err(e) => {
                let text = format!("{shown}: {e}; retrying (is nats-server up, and are NATS_AUTH_* set as for Dynamo's workers?)");
                let state = match e.kind() {
                    async_nats::ConnectErrorKind::Authentication | async_nats::ConnectErrorKind::AuthorizationViolation => {
                        proto::ConnState::Error
                    }
                    _ => proto::ConnState::Connecting,
                };
                pipeline.set_state(state, Some(text));
                // Shutdown is seen at the top of the loop.
                backoff.wait(&mut shutdown).await;
            }
        }
    };
    // Read-only: a plain core subscription; kvscope publishes nothing and creates no consumer.
    let mut subscriber = match client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            pipeline.set_state(proto::ConnState::Error, Some(format!("{shown}: subscribe to {subject:?} failed: {e}")));
            let _ = shutdown.changed().await;
            pipeline.flush_status();
            return pipeline;
        }
    };
    pipeline.set_state(proto::ConnState::Live, None);
    tracing::info!(source = %pipeline.key, %subject, "subscribed");
    let mut tick = tokio::time::interval(opts.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut up = true;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            change = events.recv() => match change {
                Some(Change::Connected) if !up => {
                    up = true;
                    pipeline.count_reconnect();
                    pipeline.set_state(proto::ConnState::Live, None);
                    tracing::info!(source = %pipeline.key, "reconnected");
                }
                Some(Change::Disconnected) => {
                    up = false;
                    pipeline.set_state(proto::ConnState::Connecting, Some(format!("{shown}: connection lost; reconnecting")));
                    tracing::info!(source = %pipeline.key, "disconnected");
                }
                Some(Change::Problem(text)) => tracing::warn!(source = %pipeline.key, "{text}"),
                _ => {}
            },
            message = subscriber.next() => match message {
                Some(m) => {
                    if !is_kv_events(&m.subject) {
                        continue;
                    }
                    pipeline.wake();
                    let subject = Bytes::copy_from_slice(m.subject.as_bytes());
                    pipeline.message(vec![subject, m.payload], unix_nanos());
                    pipeline.output.flush_pending().await;
                }
                None => {
                    pipeline.set_state(proto::ConnState::Error, Some(format!("{shown}: the subscription ended (the client was closed)")));
                    let _ = shutdown.changed().await;
                    break;
                }
            },
            _ = tick.tick() => {
                pipeline.check_stale(opts.stale_after);
                pipeline.flush_status_if_dirty();
            }
        }
    }
    drop(subscriber);
    drop(client);
    pipeline.flush_status();
    pipeline.output.flush_pending().await;
    pipeline
}

/// How long a test or the demo waits for a NATS connection.
pub const CONNECT_WAIT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    #[test]
    fn only_kv_event_subjects_are_taken() {
        assert!(super::is_kv_events("namespace.dynamo.component.backend.endpoint.generate.kv-events"));
        assert!(super::is_kv_events("namespace.x.component.y.kv-events"));
        assert!(!super::is_kv_events("namespace.x.component.y.kv-metrics"));
        assert!(!super::is_kv_events("namespace.x.kv-events.more"));
    }
}
