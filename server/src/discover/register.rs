//! `kvscope demo --register URL`: registers the demo's simulated relays in a discovery store as
//! Dynamo 1.6.1's runtime registers a `KvEventPublisher` on the ZMQ event plane, so that
//! `serve --discover` (and `--shard`) has a fleet to find on one machine.
//!
//! Per relay: an `EventChannel` (its ZMQ endpoint) and an `EventSource` (its worker and rank)
//! under one id, and a model card with the block size; kept alive as Dynamo keeps them (an etcd
//! lease refreshed every few seconds; files touched every few seconds) and removed when the demo
//! stops. The records are written here and read by `records`: the unit test reads back what is
//! written, so the two cannot drift apart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::records::{EVENT_CHANNELS, EVENT_SOURCES, MODEL_CARDS};
use super::{DiscoverOptions, DiscoverUrl, etcd};

/// Dynamo's namespace, component and endpoint for the demo (its NATS subject says the same).
const SCOPE: (&str, &str, &str) = ("demo", "backend", "generate");

/// How often a registration is refreshed: Dynamo touches its files at a third of their 10 s TTL.
const REFRESH: Duration = Duration::from_secs(3);

/// The lease the demo's keys live under on etcd.
const LEASE_TTL_SECS: u64 = 10;

/// One relay to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub worker_id: u64,
    pub dp_rank: u32,
    /// Its publisher id (the relay's registration id).
    pub instance_id: u64,
    /// `tcp://HOST:PORT` of its ZMQ-plane publisher.
    pub endpoint: String,
    pub block_size: u32,
}

/// The keys and values Dynamo 1.6.1's runtime writes for `r`.
pub fn records(r: &Registration) -> Vec<(String, Vec<u8>)> {
    let (ns, component, name) = SCOPE;
    let scope = serde_json::json!({ "kind": "endpoint", "endpoint": { "namespace": ns, "component": component, "name": name } });
    let rest = format!("namespace/{ns}/component/{component}/endpoint/{name}/topic/kv-events/{:x}", r.instance_id);
    let channel = serde_json::json!({
        "type": "EventChannel", "scope": scope, "topic": "kv-events", "instance_id": r.instance_id,
        "transport": { "kind": "Zmq", "config": { "endpoint": r.endpoint } },
    });
    let source = serde_json::json!({
        "type": "EventSource", "scope": scope, "topic": "kv-events", "publisher_id": r.instance_id,
        "metadata": {
            "kv_state_endpoint": { "namespace": ns, "component": component, "name": name },
            "worker": { "worker_id": r.worker_id, "dp_rank": r.dp_rank },
            "publisher_id": r.instance_id,
        },
    });
    let card = serde_json::json!({
        "type": "Model", "namespace": ns, "component": component, "endpoint": name, "instance_id": r.instance_id,
        "card_json": { "display_name": "kvscope-demo", "kv_cache_block_size": r.block_size,
                       "runtime_config": { "data_parallel_size": 1, "data_parallel_start_rank": r.dp_rank } },
    });
    vec![
        (format!("{EVENT_CHANNELS}{rest}"), channel.to_string().into_bytes()),
        (format!("{EVENT_SOURCES}{rest}"), source.to_string().into_bytes()),
        (format!("{MODEL_CARDS}{ns}/{component}/{name}/{:x}", r.instance_id), card.to_string().into_bytes()),
    ]
}

/// Registers `regs` in the store at `url` until `stop`, then removes them. Errors after the first
/// registration are logged and retried; the demo goes on either way.
pub async fn run(url: DiscoverUrl, regs: Vec<Registration>, opts: DiscoverOptions, mut stop: watch::Receiver<bool>) -> Result<(), String> {
    let all: Vec<(String, Vec<u8>)> = regs.iter().flat_map(records).collect();
    match url {
        DiscoverUrl::DynamoFile { dir } => {
            let files = write_files(&dir, &all)?;
            let mut tick = tokio::time::interval(REFRESH);
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tick.tick() => for f in &files { touch(f) },
                }
            }
            for f in &files {
                let _ = std::fs::remove_file(f);
            }
            Ok(())
        }
        DiscoverUrl::Etcd { endpoints } => {
            let mut client = etcd::Client::from_env(endpoints);
            let lease = client.grant(LEASE_TTL_SECS, opts).await?;
            for (key, value) in &all {
                client.put(key, value, lease, opts).await?;
            }
            let mut tick = tokio::time::interval(REFRESH);
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tick.tick() => if let Err(e) = client.keep_alive(lease, opts).await {
                        tracing::warn!("--register: refreshing the lease failed: {e}");
                    },
                }
            }
            client.revoke(lease, opts).await
        }
        DiscoverUrl::DynamoIndexer { .. } => {
            Err("--register takes etcd://HOST:PORT or dynamo-file:DIR: a standalone indexer is not a discovery store".to_owned())
        }
    }
}

/// Writes each record as Dynamo's file backend does (`DIR/v1/{bucket}/{rest, percent-encoded}`),
/// through a temporary file so that a reader never sees half a record.
fn write_files(dir: &Path, records: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for (key, value) in records {
        let (bucket, rest) = key.split_at(key.match_indices('/').nth(1).map_or(key.len(), |(i, _)| i + 1));
        let name = percent_encoding::utf8_percent_encode(rest, percent_encoding::NON_ALPHANUMERIC).to_string();
        let bucket_dir = dir.join(bucket.trim_end_matches('/'));
        std::fs::create_dir_all(&bucket_dir).map_err(|e| format!("--register: {}: {e}", bucket_dir.display()))?;
        let path = bucket_dir.join(name);
        let tmp = bucket_dir.join(format!(".tmp_kvscope_{}", files.len()));
        std::fs::write(&tmp, value)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("--register: {}: {e}", path.display()))?;
        files.push(path);
    }
    Ok(files)
}

fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::records::{Transport, read_store};

    #[test]
    fn what_is_registered_reads_back_as_the_relay() {
        let r = Registration { worker_id: 5, dp_rank: 1, instance_id: 0xabc, endpoint: "tcp://127.0.0.1:5600".into(), block_size: 32 };
        let written = records(&r);
        let (fleet, errors) = read_store(written.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        assert!(errors.is_empty(), "{errors:?}");
        let relay = &fleet.relays[&(5, 1)];
        assert_eq!((relay.instance_id, &relay.transport), (0xabc, &Transport::Zmq { endpoint: "tcp://127.0.0.1:5600".into() }));
        assert_eq!(fleet.block_size(&relay.model), Some(32));
    }

    #[test]
    fn files_are_laid_out_as_dynamo_s_file_backend_lays_them_out() {
        let dir = std::env::temp_dir().join(format!("kvscope-register-test-{}", std::process::id()));
        let r = Registration { worker_id: 5, dp_rank: 0, instance_id: 0xabc, endpoint: "tcp://127.0.0.1:5600".into(), block_size: 16 };
        let files = write_files(&dir, &records(&r)).unwrap();
        let name = files[0].strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
        assert_eq!(name, "v1/event_channels/namespace%2Fdemo%2Fcomponent%2Fbackend%2Fendpoint%2Fgenerate%2Ftopic%2Fkv%2Devents%2Fabc");
        let read = crate::discover::file::Store::new(dir.clone()).read(1 << 20).unwrap();
        let (fleet, _) = read_store(read.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        assert_eq!(fleet.relays.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
