//! Writing `.kvcap` files while frames flow (`kvscope record`, `serve --record`), and opening
//! them (`replay`, `check`, `publish`). The format itself lives in `kvscope_protocol::capture`.
//!
//! The intake hands each record, already encoded, to a writer task through a bounded channel.
//! The writer flushes its buffer at least once a second, so a recorder that is killed loses at
//! most the last second (the reader reports the cut record and keeps the rest). Unlike a browser,
//! the disk is allowed to slow the intake down: a recording that silently dropped frames would
//! defeat its purpose, so when the channel is full the intake waits (the engine's PUB socket
//! buffers meanwhile) rather than dropping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kvscope_protocol::capture::{self, CaptureHeader, CaptureReader};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

/// Records in flight between the intake and the writer.
const CHANNEL_RECORDS: usize = 16 * 1024;

/// How often the writer flushes, at most this long after a record arrived.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);

/// Totals of a finished recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub records: u64,
    pub bytes: u64,
}

/// A handle the intake uses to append records; cheap to clone.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Recorder {
    /// Appends one record (frames as received). Waits only if the disk is behind.
    pub async fn record<F: AsRef<[u8]>>(&self, source: u32, recv_time_nanos: u64, replayed: bool, frames: &[F]) {
        let bytes = capture::encode_record_parts(source, recv_time_nanos, replayed, frames);
        match self.tx.try_send(bytes) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(bytes)) => {
                let _ = self.tx.send(bytes).await;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Appends without waiting; for callers that cannot await (the stream's output). Returns
    /// the record when the channel is full so the caller can send it later.
    pub fn try_record(&self, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        match self.tx.try_send(bytes) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Full(bytes)) => Err(bytes),
        }
    }

    /// Waits for room, then appends.
    pub async fn send(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(bytes).await;
    }
}

/// The writer task's handle: drop every [`Recorder`] clone, then await [`Writer::finish`].
#[derive(Debug)]
pub struct Writer {
    done: oneshot::Receiver<std::io::Result<Written>>,
    path: PathBuf,
}

impl Writer {
    /// Waits until every record sent before the last `Recorder` was dropped is on disk.
    pub async fn finish(self) -> Result<Written, String> {
        match self.done.await {
            Ok(Ok(w)) => Ok(w),
            Ok(Err(e)) => Err(format!("{}: {e}", self.path.display())),
            Err(_) => Err(format!("{}: the capture writer stopped unexpectedly", self.path.display())),
        }
    }
}

/// Creates `path` (replacing it), writes the header and starts the writer task.
pub async fn create(path: &Path, header: &CaptureHeader) -> Result<(Recorder, Writer), String> {
    let file = tokio::fs::File::create(path).await.map_err(|e| {
        format!("{}: cannot create the capture file: {e}; check that the directory exists and is writable", path.display())
    })?;
    let mut out = tokio::io::BufWriter::with_capacity(256 * 1024, file);
    let mut head = Vec::new();
    capture::write_header(&mut head, header).expect("writing to a Vec");
    out.write_all(&head).await.map_err(|e| format!("{}: {e}", path.display()))?;
    out.flush().await.map_err(|e| format!("{}: {e}", path.display()))?;
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(CHANNEL_RECORDS);
    let (done_tx, done) = oneshot::channel();
    let head_len = head.len() as u64;
    tokio::spawn(async move {
        let result = async {
            let mut written = Written { records: 0, bytes: head_len };
            let mut tick = tokio::time::interval(FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut dirty = false;
            loop {
                tokio::select! {
                    record = rx.recv() => match record {
                        Some(bytes) => {
                            out.write_all(&bytes).await?;
                            written.records += 1;
                            written.bytes += bytes.len() as u64;
                            dirty = true;
                        }
                        None => break,
                    },
                    _ = tick.tick() => if dirty {
                        out.flush().await?;
                        dirty = false;
                    },
                }
            }
            out.flush().await?;
            out.into_inner().sync_all().await?;
            Ok(written)
        }
        .await;
        let _ = done_tx.send(result);
    });
    Ok((Recorder { tx }, Writer { done, path: path.to_owned() }))
}

/// Opens a capture for reading, with the file name in every error.
pub fn open(path: &Path) -> Result<CaptureReader<std::io::BufReader<std::fs::File>>, String> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("{}: cannot open the capture: {e}", path.display()))?;
    CaptureReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|e| e.with_path(&path.display().to_string()).to_string())
}

/// A header for a new capture of `sources`.
pub fn header(sources: Vec<kvscope_protocol::SourceInfo>, note: Option<String>) -> CaptureHeader {
    CaptureHeader {
        created_unix_nanos: crate::time::unix_nanos(),
        kvscope_version: env!("CARGO_PKG_VERSION").to_owned(),
        sources,
        note,
    }
}
