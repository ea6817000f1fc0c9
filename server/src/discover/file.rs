//! Dynamo's file backend (`DYN_DISCOVERY_BACKEND=file`, `DYN_FILE_KV=DIR`): one file per key,
//! holding the record's JSON, at `DIR/v1/{bucket}/{rest of the key, percent-encoded}` (seen with
//! Dynamo 1.6.1: `v1/event_channels/namespace%2Fdynamo%2F…%2F1c11a2ec636433`).
//!
//! A live process touches its files every few seconds (about 3 s, seen); one that died, or was
//! stopped, leaves them behind. A file not touched for longer than the TTL is gone, as Dynamo's
//! own readers treat it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::records::PREFIXES;

/// Dynamo 1.6.1's TTL for the file backend's keys.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A file backend's directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    ttl: Duration,
}

impl Store {
    pub fn new(dir: PathBuf) -> Store {
        Store { dir, ttl: DEFAULT_TTL }
    }

    /// Every live key under kvscope's prefixes with its value, at most `max_bytes` of values in all.
    pub fn read(&self, max_bytes: usize) -> Result<Vec<(String, Vec<u8>)>, String> {
        let meta =
            std::fs::metadata(&self.dir).map_err(|e| format!("{}: {e} (is this Dynamo's DYN_FILE_KV directory?)", self.dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory (give the DYN_FILE_KV directory)", self.dir.display()));
        }
        let now = SystemTime::now();
        let mut out = Vec::new();
        let mut total = 0usize;
        for prefix in PREFIXES {
            let root = self.dir.join(prefix.trim_end_matches('/'));
            let mut stack = vec![root];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else { continue };
                for entry in entries.flatten() {
                    let path = entry.path();
                    let Ok(meta) = entry.metadata() else { continue };
                    if meta.is_dir() {
                        stack.push(path);
                        continue;
                    }
                    let fresh = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_none_or(|age| age <= self.ttl);
                    if !fresh {
                        continue;
                    }
                    // A file removed between listing and reading is simply gone.
                    let Ok(value) = std::fs::read(&path) else { continue };
                    total += value.len();
                    if total > max_bytes {
                        return Err(format!(
                            "{} holds more than {max_bytes} bytes of records (raise --discover-max-bytes)",
                            self.dir.display()
                        ));
                    }
                    out.push((key_of(&self.dir, &path), value));
                }
            }
        }
        Ok(out)
    }
}

/// The key a file stands for: its path under the directory, each part percent-decoded, with
/// `/` separators.
fn key_of(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| percent_encoding::percent_decode_str(&c.as_os_str().to_string_lossy()).decode_utf8_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_stands_for_its_decoded_key() {
        let root = Path::new("/kv");
        let path =
            root.join("v1/event_channels/namespace%2Fdynamo%2Fcomponent%2Fbackend%2Fendpoint%2Fgenerate%2Ftopic%2Fkv%2Devents%2F1c11a2");
        assert_eq!(key_of(root, &path), "v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv-events/1c11a2");
    }
}
