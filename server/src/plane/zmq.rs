//! The ZMQ event-plane intake: a SUB to one publisher of Dynamo's ZMQ plane (`--event-plane
//! zmq://HOST:PORT`, the endpoint its discovery record advertises), with the engine intake's
//! connection loop: a fresh socket per attempt, a short connect timeout, capped backoff, and the
//! socket monitor watched for `Disconnected`.

use futures_util::StreamExt;
use kvscope_protocol as proto;
use tokio::sync::watch;
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket};

use super::PlanePipeline;
use super::nats::stale_check;
use crate::intake::{Backoff, IntakeOptions, RelayOutput};
use crate::time::unix_nanos;

/// Runs one ZMQ-plane source until `shutdown` turns true.
pub async fn run(
    endpoint: String,
    mut pipeline: PlanePipeline<RelayOutput>,
    opts: IntakeOptions,
    mut shutdown: watch::Receiver<bool>,
) -> PlanePipeline<RelayOutput> {
    let mut backoff = Backoff::new(&opts);
    let mut ever_connected = false;
    let mut last_error: Option<String> = None;
    'outer: loop {
        if *shutdown.borrow() {
            break;
        }
        pipeline.set_state(proto::ConnState::Connecting, last_error.clone());
        let mut options = SocketOptions::default();
        options.connect_timeout(opts.connect_timeout);
        let mut socket = SubSocket::with_options(options);
        let mut monitor = socket.monitor();
        if let Err(e) = socket.subscribe("").await {
            tracing::warn!(source = %pipeline.key, "subscribe failed: {e}");
        }
        let connected = tokio::select! {
            r = tokio::time::timeout(opts.connect_timeout * 3, socket.connect(&endpoint)) => r,
            _ = shutdown.changed() => break 'outer,
        };
        if !matches!(connected, Ok(Ok(()))) {
            let why = match connected {
                Ok(Err(e)) => e.to_string(),
                _ => "connect timed out".to_owned(),
            };
            last_error = Some(format!(
                "{endpoint}: {why}; retrying (is the Dynamo relay up, and is this the endpoint its discovery record advertises?)"
            ));
            pipeline.set_state(proto::ConnState::Connecting, last_error.clone());
            if !backoff.wait(&mut shutdown).await {
                break 'outer;
            }
            continue;
        }
        backoff.reset();
        if ever_connected {
            pipeline.count_reconnect();
        }
        ever_connected = true;
        pipeline.set_state(proto::ConnState::Live, None);
        tracing::info!(source = %pipeline.key, %endpoint, "connected");
        let mut tick = tokio::time::interval(opts.status_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break 'outer,
                event = monitor.next() => match event {
                    Some(SocketEvent::Disconnected(_)) | None => {
                        last_error = Some(format!("{endpoint}: connection lost; reconnecting"));
                        break;
                    }
                    Some(_) => {}
                },
                message = socket.recv() => match message {
                    Ok(message) => {
                        if pipeline.state() == proto::ConnState::Stale {
                            pipeline.set_state(proto::ConnState::Live, None);
                        }
                        pipeline.message(message.into_vec(), unix_nanos());
                        pipeline.output.flush_pending().await;
                    }
                    Err(e) => {
                        last_error = Some(format!("{endpoint}: {e}; reconnecting"));
                        break;
                    }
                },
                _ = tick.tick() => {
                    stale_check(&mut pipeline, &opts);
                    pipeline.flush_status_if_dirty();
                }
            }
        }
        drop(socket);
        pipeline.set_state(proto::ConnState::Connecting, last_error.clone());
        tokio::select! {
            _ = tokio::time::sleep(opts.backoff_min) => {}
            _ = shutdown.changed() => break 'outer,
        }
    }
    pipeline.flush_status();
    pipeline.output.flush_pending().await;
    pipeline
}
