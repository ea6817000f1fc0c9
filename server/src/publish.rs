//! `kvscope publish`: re-publish a capture as engines would, so any indexer (kvscope's or
//! another) can be tested against a recorded incident.
//!
//! Each source of the capture gets its own endpoint, as each engine rank has: source `i` binds
//! the `--bind` port + `i` and its replay ROUTER the `--replay-bind` port + `i` (port 0 picks
//! free ports; the chosen endpoints are printed). Frames keep their topic and sequence number;
//! frames the recorder got through replay are published in their seq position like the others;
//! malformed messages are sent as they were recorded. The publisher is an XPUB, identical to a
//! PUB for subscribers, so it can wait for `--wait-subscribers` subscriptions first and the
//! indexer sees the capture from its first frame.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use kvscope_wire::frame::{ReplayReply, parse_live, parse_replay_reply};

use crate::capture;
use crate::demo::engine::Engine;
use crate::sources::parse_tcp_endpoint;

/// What `publish` was asked to do.
#[derive(Clone, Debug)]
pub struct PublishOptions {
    pub file: PathBuf,
    pub bind: String,
    pub replay_bind: Option<String>,
    /// `None`: as fast as the subscribers take it.
    pub speed: Option<f64>,
    pub wait_subscribers: usize,
    /// Only this source (`worker:rank`).
    pub source: Option<String>,
    pub replay_topic: bool,
    /// Exit once everything is published, instead of serving replays until Ctrl-C.
    pub exit_when_done: bool,
}

fn nth_endpoint(base: &str, i: usize) -> Result<String, String> {
    let (host, port) = parse_tcp_endpoint(base).map_err(|e| format!("--bind {base:?}: {e}"))?;
    if port == 0 {
        return Ok(format!("tcp://{host}:0"));
    }
    let port = u32::from(port) + i as u32;
    if port > 65535 {
        return Err(format!("--bind {base}: source {i} would need port {port}; lower the base port"));
    }
    Ok(format!("tcp://{host}:{port}"))
}

/// Runs `publish` to the end; returns frames published per source.
pub async fn run(opts: PublishOptions, out: &mut (dyn std::io::Write + Send)) -> Result<Vec<(String, u64)>, String> {
    let mut reader = capture::open(&opts.file)?;
    let infos = reader.header().sources.clone();
    // Reads of a router index and discovery events are not streams anyone subscribes to.
    let streams = |i: &kvscope_protocol::SourceInfo| {
        !matches!(i.kind, kvscope_protocol::SourceKind::RouterIndex | kvscope_protocol::SourceKind::Discovery)
    };
    let selected: Vec<bool> = infos.iter().map(|i| streams(i) && opts.source.as_ref().is_none_or(|s| *s == i.key)).collect();
    if let Some(s) = &opts.source
        && !selected.iter().any(|x| *x)
    {
        let keys: Vec<&str> = infos.iter().map(|i| i.key.as_str()).collect();
        return Err(format!("--source {s}: the capture has no such source; it has {}", keys.join(", ")));
    }
    let replay_base = match &opts.replay_bind {
        Some(r) => r.clone(),
        None => {
            let (host, _) = parse_tcp_endpoint(&opts.bind).map_err(|e| format!("--bind {:?}: {e}", opts.bind))?;
            format!("tcp://{host}:0")
        }
    };
    let mut engines: Vec<Option<Engine>> = Vec::new();
    let mut slot = 0;
    for (i, info) in infos.iter().enumerate() {
        if !selected[i] {
            engines.push(None);
            continue;
        }
        let bind = nth_endpoint(&opts.bind, slot)?;
        let replay = nth_endpoint(&replay_base, slot)?;
        slot += 1;
        let engine = Engine::bind(&bind, &replay, true, opts.replay_topic).await?;
        let _ = writeln!(out, "{} pub {} replay {}", info.key, engine.endpoint, engine.replay_endpoint);
        engines.push(Some(engine));
    }
    let _ = out.flush();
    if opts.wait_subscribers > 0 {
        let _ = writeln!(out, "waiting for {} subscriber(s) on each endpoint", opts.wait_subscribers);
        let _ = out.flush();
        for engine in engines.iter_mut().flatten() {
            engine.wait_subscribers(opts.wait_subscribers).await;
        }
    }
    let mut published = vec![0u64; infos.len()];
    let started = tokio::time::Instant::now();
    let mut first: Option<u64> = None;
    while let Some(record) = reader.next_record().map_err(|e| e.with_path(&opts.file.display().to_string()).to_string())? {
        let Some(Some(engine)) = engines.get_mut(record.source as usize) else { continue };
        if let Some(speed) = opts.speed {
            let t0 = *first.get_or_insert(record.recv_time_nanos);
            let due = Duration::from_nanos((record.recv_time_nanos.saturating_sub(t0) as f64 / speed) as u64);
            tokio::time::sleep_until(started + due).await;
        }
        let frames: Vec<Bytes> = record.frames.into_iter().map(|f| Bytes::from(f.into_vec())).collect();
        let parsed = if record.replayed {
            match parse_replay_reply(&frames) {
                Ok(ReplayReply::Message { topic, seq, payload }) => {
                    Some((Bytes::copy_from_slice(topic.unwrap_or(b"kv-events")), seq, Bytes::copy_from_slice(payload)))
                }
                _ => None,
            }
        } else {
            parse_live(&frames).ok().map(|m| (frames[0].clone(), m.seq, frames[2].clone()))
        };
        match parsed {
            Some((topic, seq, payload)) => engine.publish_with_seq(&topic, seq, payload).await,
            // Malformed as recorded: send as is, so the indexer under test meets it too.
            None if !record.replayed && !frames.is_empty() => engine.send(frames).await,
            None => continue,
        }
        published[record.source as usize] += 1;
    }
    if let Some(t) = reader.truncated() {
        tracing::warn!("{}: {t}", opts.file.display());
    }
    let summary: Vec<(String, u64)> = infos.iter().zip(&published).map(|(i, n)| (i.key.clone(), *n)).collect();
    for (key, n) in &summary {
        let _ = writeln!(out, "{key}: published {n} messages");
    }
    let _ = out.flush();
    if opts.exit_when_done {
        // PUB sends are queued: give the last messages time to leave before the sockets close.
        tokio::time::sleep(Duration::from_millis(500)).await;
    } else {
        let _ = writeln!(out, "done; still serving replay requests (Ctrl-C to stop)");
        let _ = out.flush();
        let _ = tokio::signal::ctrl_c().await;
    }
    drop(engines);
    Ok(summary)
}
