//! Parsing `--workers`, `--replay` and `--dp-size` into a list of sources.
//!
//! The form is the Dynamo indexer's: `"id[:dp]=tcp://host:port,..."`. `--replay` uses the same
//! form to name each source's replay ROUTER. `--dp-size N` expands every entry that names no rank
//! into ranks `0..N` on consecutive ports (`base + rank`), for both flags, because each
//! data-parallel rank of an engine publishes on its own port with its own sequence counter.
//!
//! Neighbours: `cli` hands the raw strings in; `intake` gets one [`Source`] per task and the
//! protocol's `SourceInfo` is built from it.

use std::fmt;

use kvscope_protocol as proto;

/// One endpoint to subscribe to: a worker's data-parallel rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub worker_id: String,
    pub dp_rank: u32,
    /// `tcp://host:port` of the engine's PUB socket.
    pub endpoint: String,
    /// `tcp://host:port` of the engine's replay ROUTER, when one was named.
    pub replay_endpoint: Option<String>,
}

impl Source {
    /// `worker_id:dp_rank`, as logs, metrics and errors name the source.
    pub fn key(&self) -> String {
        proto::engine_key(&self.worker_id, self.dp_rank)
    }

    pub fn info(&self, index: u32) -> proto::SourceInfo {
        proto::SourceInfo::engine(index, &self.worker_id, self.dp_rank, &self.endpoint, self.replay_endpoint.clone())
    }
}

/// A `--workers`/`--replay` value that cannot be used, with what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    worker_id: String,
    dp_rank: Option<u32>,
    host: String,
    port: u16,
}

/// Splits `tcp://host:port` (IPv6 hosts in brackets) into host and port.
pub fn parse_tcp_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        if let Some((scheme, _)) = endpoint.split_once("://") {
            return Err(format!(
                "transport {scheme:?} is not supported; kvscope connects over tcp://host:port (engines publish on tcp by default)"
            ));
        }
        return Err("expected tcp://host:port".to_owned());
    };
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| "expected tcp://host:port, the port is missing".to_owned())?;
    if host.is_empty() {
        return Err("expected tcp://host:port, the host is missing".to_owned());
    }
    if host == "*" {
        return Err("\"*\" binds on every interface; to connect, name the engine's host".to_owned());
    }
    let port: u16 = port.parse().map_err(|_| format!("port {port:?} is not a number from 0 to 65535"))?;
    Ok((host.to_owned(), port))
}

fn parse_entries(flag: &str, spec: &str) -> Result<Vec<Entry>, SpecError> {
    let mut entries = Vec::new();
    for (position, raw) in spec.split(',').map(str::trim).enumerate() {
        if raw.is_empty() {
            continue;
        }
        let context = |what: String| SpecError(format!("{flag} entry {} ({raw:?}): {what}", position + 1));
        let (name, endpoint) = match raw.split_once('=') {
            Some((name, endpoint)) => (name.trim(), endpoint.trim()),
            // A bare endpoint gets its position as worker id, so `--workers tcp://a:5557` works.
            None if raw.contains("://") => ("", raw),
            None => {
                return Err(context(format!("expected id[:dp]=tcp://host:port, for example \"{raw}=tcp://127.0.0.1:5557\"")));
            }
        };
        let (worker_id, dp_rank) = match name.split_once(':') {
            Some((id, dp)) => {
                let dp: u32 = dp
                    .parse()
                    .map_err(|_| context(format!("data-parallel rank {dp:?} is not a number; write id:rank, e.g. \"{id}:0\"")))?;
                (id.to_owned(), Some(dp))
            }
            None if name.is_empty() => (entries.len().to_string(), None),
            None => (name.to_owned(), None),
        };
        if worker_id.is_empty() {
            return Err(context("the worker id before ':' is empty".to_owned()));
        }
        let (host, port) = parse_tcp_endpoint(endpoint).map_err(|e| context(format!("{endpoint:?}: {e}")))?;
        entries.push(Entry { worker_id, dp_rank, host, port });
    }
    if entries.is_empty() {
        return Err(SpecError(format!("{flag} names no endpoint; write \"id=tcp://host:port\", e.g. {flag} \"0=tcp://127.0.0.1:5557\"")));
    }
    Ok(entries)
}

/// Expands entries without a rank into `dp_size` ranks on consecutive ports.
fn expand(flag: &str, entries: Vec<Entry>, dp_size: u32) -> Result<Vec<(String, u32, String)>, SpecError> {
    let mut out = Vec::new();
    for e in entries {
        let ranks: Vec<u32> = match e.dp_rank {
            Some(rank) => vec![rank],
            None => (0..dp_size.max(1)).collect(),
        };
        for rank in ranks {
            let offset = if e.dp_rank.is_some() { 0 } else { rank };
            let port = u32::from(e.port) + offset;
            if port > 65535 {
                return Err(SpecError(format!(
                    "{flag} {}: --dp-size {dp_size} puts rank {rank} on port {port}, past 65535; lower the base port",
                    e.worker_id
                )));
            }
            let host = if e.host.contains(':') && !e.host.starts_with('[') { format!("[{}]", e.host) } else { e.host.clone() };
            out.push((e.worker_id.clone(), rank, format!("tcp://{host}:{port}")));
        }
    }
    Ok(out)
}

/// Parses `--workers`, `--replay` and `--dp-size` into sources, in `--workers` order.
pub fn parse_sources(workers: &str, replay: Option<&str>, dp_size: u32) -> Result<Vec<Source>, SpecError> {
    if dp_size == 0 {
        return Err(SpecError("--dp-size 0: a worker has at least one rank; pass --dp-size 1 or more".to_owned()));
    }
    let mut sources: Vec<Source> = Vec::new();
    for (worker_id, dp_rank, endpoint) in expand("--workers", parse_entries("--workers", workers)?, dp_size)? {
        let key = format!("{worker_id}:{dp_rank}");
        if let Some(previous) = sources.iter().find(|s| s.key() == key) {
            return Err(SpecError(format!(
                "--workers names {key} twice ({} and {endpoint}); give each worker and rank one endpoint",
                previous.endpoint
            )));
        }
        if let Some(previous) = sources.iter().find(|s| s.endpoint == endpoint) {
            return Err(SpecError(format!(
                "--workers: {key} and {} both use {endpoint}; each rank publishes on its own port",
                previous.key()
            )));
        }
        sources.push(Source { worker_id, dp_rank, endpoint, replay_endpoint: None });
    }
    if let Some(replay) = replay {
        for (worker_id, dp_rank, endpoint) in expand("--replay", parse_entries("--replay", replay)?, dp_size)? {
            let key = format!("{worker_id}:{dp_rank}");
            let known: Vec<String> = sources.iter().map(Source::key).collect();
            let Some(source) = sources.iter_mut().find(|s| s.key() == key) else {
                return Err(SpecError(format!(
                    "--replay names {key}, which --workers does not (it has {}); use the same id[:dp] in both flags",
                    known.join(", ")
                )));
            };
            if source.replay_endpoint.is_some() {
                return Err(SpecError(format!("--replay names {key} twice")));
            }
            source.replay_endpoint = Some(endpoint);
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(sources: &[Source]) -> Vec<(String, String, Option<String>)> {
        sources.iter().map(|s| (s.key(), s.endpoint.clone(), s.replay_endpoint.clone())).collect()
    }

    #[test]
    fn dynamo_form_with_ranks_and_replay() {
        let s = parse_sources("0=tcp://10.0.0.5:5557, 1:1=tcp://h:6000", Some("0=tcp://10.0.0.5:5558"), 1).unwrap();
        assert_eq!(
            keys(&s),
            vec![
                ("0:0".into(), "tcp://10.0.0.5:5557".into(), Some("tcp://10.0.0.5:5558".into())),
                ("1:1".into(), "tcp://h:6000".into(), None),
            ]
        );
    }

    #[test]
    fn dp_size_expands_both_flags_on_consecutive_ports() {
        let s = parse_sources("w=tcp://h:5557", Some("w=tcp://h:5600"), 3).unwrap();
        assert_eq!(
            keys(&s),
            (0..3).map(|r| (format!("w:{r}"), format!("tcp://h:{}", 5557 + r), Some(format!("tcp://h:{}", 5600 + r)))).collect::<Vec<_>>()
        );
    }

    #[test]
    fn bare_endpoints_get_their_position_as_id() {
        let s = parse_sources("tcp://a:1,tcp://b:2", None, 1).unwrap();
        assert_eq!(s.iter().map(Source::key).collect::<Vec<_>>(), ["0:0", "1:0"]);
    }

    #[test]
    fn errors_name_the_entry_and_the_fix() {
        let rows: &[(&str, Option<&str>, u32, &str)] = &[
            ("", None, 1, "--workers names no endpoint; write \"id=tcp://host:port\", e.g. --workers \"0=tcp://127.0.0.1:5557\""),
            ("0=h:5557", None, 1, "--workers entry 1 (\"0=h:5557\"): \"h:5557\": expected tcp://host:port"),
            (
                "0=ipc:///tmp/x",
                None,
                1,
                "--workers entry 1 (\"0=ipc:///tmp/x\"): \"ipc:///tmp/x\": transport \"ipc\" is not supported; kvscope connects over tcp://host:port (engines publish on tcp by default)",
            ),
            (
                "0=tcp://h:99999",
                None,
                1,
                "--workers entry 1 (\"0=tcp://h:99999\"): \"tcp://h:99999\": port \"99999\" is not a number from 0 to 65535",
            ),
            (
                "0:x=tcp://h:1",
                None,
                1,
                "--workers entry 1 (\"0:x=tcp://h:1\"): data-parallel rank \"x\" is not a number; write id:rank, e.g. \"0:0\"",
            ),
            (
                "0=tcp://*:5557",
                None,
                1,
                "--workers entry 1 (\"0=tcp://*:5557\"): \"tcp://*:5557\": \"*\" binds on every interface; to connect, name the engine's host",
            ),
            (
                "0=tcp://h:1,0=tcp://h:2",
                None,
                1,
                "--workers names 0:0 twice (tcp://h:1 and tcp://h:2); give each worker and rank one endpoint",
            ),
            ("0=tcp://h:1,1=tcp://h:1", None, 1, "--workers: 1:0 and 0:0 both use tcp://h:1; each rank publishes on its own port"),
            (
                "0=tcp://h:1",
                Some("1=tcp://h:2"),
                1,
                "--replay names 1:0, which --workers does not (it has 0:0); use the same id[:dp] in both flags",
            ),
            ("0=tcp://h:65535", None, 2, "--workers 0: --dp-size 2 puts rank 1 on port 65536, past 65535; lower the base port"),
            ("0=tcp://h:1", None, 0, "--dp-size 0: a worker has at least one rank; pass --dp-size 1 or more"),
            (
                "worker0",
                None,
                1,
                "--workers entry 1 (\"worker0\"): expected id[:dp]=tcp://host:port, for example \"worker0=tcp://127.0.0.1:5557\"",
            ),
        ];
        for (workers, replay, dp, want) in rows {
            assert_eq!(parse_sources(workers, *replay, *dp).unwrap_err().to_string(), *want, "{workers}");
        }
    }
}
