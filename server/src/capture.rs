//! Writing `.kvcap` files while frames flow (`kvscope record`, `serve --record`), and opening
//! them (`replay`, `check`, `publish`). The format itself lives in `kvscope_protocol::capture`.
//!
//! The intake hands each record, already encoded, to a writer task through a bounded channel.
//! The writer writes at least every half second, so a recorder that is killed loses at most
//! that (the reader reports the cut record and keeps the rest). A write that fails ends the
//! recording, not the relay: see [`create`]. Unlike a browser,
//! the disk is allowed to slow the intake down: a recording that silently dropped frames would
//! defeat its purpose, so when the channel is full the intake waits (the engine's PUB socket
//! buffers meanwhile) rather than dropping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kvscope_protocol as proto;
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
    done: oneshot::Receiver<Result<Written, String>>,
    path: PathBuf,
}

impl Writer {
    /// Waits until every record sent before the last `Recorder` was dropped is on disk; `Err`
    /// says why the recording stopped early.
    pub async fn finish(self) -> Result<Written, String> {
        match self.done.await {
            Ok(result) => result,
            Err(_) => Err(format!("{}: the capture writer stopped unexpectedly", self.path.display())),
        }
    }
}

/// Whoever shows where a recording stands (the hub for browsers, `/metrics`).
pub type StatusSink = std::sync::Arc<dyn Fn(&proto::RecordingStatus) + Send + Sync>;

/// Bytes gathered before a write; a record is counted as written only once all its bytes are.
const WRITE_CHUNK: usize = 256 * 1024;

/// Creates `path` (replacing it), writes the header and starts the writer task.
///
/// When a write fails (the disk is full, the file was removed, a size limit), the task says so
/// through `sink` (state `failed`, with the error and the count of complete records in the
/// file), then keeps taking records and counting them as dropped: the intake never waits on a
/// recorder that can no longer write, and every frame still reaches the browsers.
pub async fn create(path: &Path, header: &CaptureHeader, sink: StatusSink) -> Result<(Recorder, Writer), String> {
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| format!("{}: cannot create the capture file: {e}; check that the directory exists and is writable", path.display()))?;
    let mut head = Vec::new();
    capture::write_header(&mut head, header).map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(&head).await.map_err(|e| format!("{}: cannot write the capture header: {e}", path.display()))?;
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(CHANNEL_RECORDS);
    let (done_tx, done) = oneshot::channel();
    let shown = path.display().to_string();
    let file = file.into_std().await;
    let mut file_out = ChunkedFile { file: Some(file), pending: Vec::with_capacity(WRITE_CHUNK), ends: Vec::new() };
    tokio::spawn(async move {
        let mut status = proto::RecordingStatus {
            path: shown.clone(),
            state: proto::RecordingState::Recording,
            error: None,
            records: 0,
            bytes: head.len() as u64,
            dropped_records: 0,
        };
        sink(&status);
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reported = status.clone();
        let fail = |status: &mut proto::RecordingStatus, e: std::io::Error| {
            status.state = proto::RecordingState::Failed;
            let text = format!(
                "{shown}: {e}; recording stopped after {} complete records, the relay goes on without it \
                 (free space or fix the path, then start a new recording)",
                status.records
            );
            tracing::error!("{text}");
            status.error = Some(text);
        };
        loop {
            tokio::select! {
                record = rx.recv() => match record {
                    Some(bytes) if status.state == proto::RecordingState::Recording => {
                        file_out.push(&bytes);
                        if file_out.pending.len() >= WRITE_CHUNK
                            && let Err(e) = file_out.write_pending(&mut status).await
                        {
                            fail(&mut status, e);
                        }
                    }
                    Some(_) => status.dropped_records += 1,
                    None => break,
                },
                _ = tick.tick() => {
                    if status.state == proto::RecordingState::Recording
                        && let Err(e) = file_out.write_pending(&mut status).await
                    {
                        fail(&mut status, e);
                    }
                    if status != reported {
                        sink(&status);
                        reported = status.clone();
                    }
                }
            }
        }
        if status.state == proto::RecordingState::Recording {
            let closed = match file_out.write_pending(&mut status).await {
                Ok(()) => file_out.sync().await,
                Err(e) => Err(e),
            };
            match closed {
                Ok(()) => status.state = proto::RecordingState::Finished,
                Err(e) => fail(&mut status, e),
            }
        }
        sink(&status);
        let result = match &status.error {
            None => Ok(Written { records: status.records, bytes: status.bytes }),
            Some(text) => Err(text.clone()),
        };
        let _ = done_tx.send(result);
    });
    Ok((Recorder { tx }, Writer { done, path: path.to_owned() }))
}

/// A file written in chunks, knowing where each record ends, so that after a failed write it can
/// tell exactly how many complete records reached the file (a reader keeps those and reports the
/// cut one). Writes are plain blocking `write` calls on a blocking thread: `tokio::fs::File`
/// acknowledges a write before it reaches the file and reports a full disk one write late,
/// which would miscount what the file holds.
struct ChunkedFile {
    file: Option<std::fs::File>,
    pending: Vec<u8>,
    /// End offset in `pending` of each record in it.
    ends: Vec<usize>,
}

impl ChunkedFile {
    fn push(&mut self, record: &[u8]) {
        self.pending.extend_from_slice(record);
        self.ends.push(self.pending.len());
    }

    /// Writes what is pending; counts the records that made it into `status` either way.
    async fn write_pending(&mut self, status: &mut proto::RecordingStatus) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let Some(file) = self.file.take() else { return Err(std::io::Error::other("the capture file is closed")) };
        let pending = std::mem::take(&mut self.pending);
        let (file, pending, written, result) = tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let mut file = file;
            let (mut written, mut result) = (0, Ok(()));
            while written < pending.len() {
                match file.write(&pending[written..]) {
                    Ok(0) => {
                        result = Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the file took no more bytes"));
                        break;
                    }
                    Ok(n) => written += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            (file, pending, written, result)
        })
        .await
        .map_err(|e| std::io::Error::other(format!("the capture writer thread failed: {e}")))?;
        self.file = Some(file);
        self.pending = pending;
        let complete = self.ends.iter().take_while(|end| **end <= written).count();
        status.records += complete as u64;
        status.bytes += complete.checked_sub(1).map_or(0, |last| self.ends[last] as u64);
        status.dropped_records += (self.ends.len() - complete) as u64;
        self.pending.clear();
        self.ends.clear();
        result
    }

    /// Flushes the file to the disk.
    async fn sync(&mut self) -> std::io::Result<()> {
        let Some(file) = self.file.take() else { return Ok(()) };
        let (file, result) = tokio::task::spawn_blocking(move || {
            let result = file.sync_all();
            (file, result)
        })
        .await
        .map_err(|e| std::io::Error::other(format!("the capture writer thread failed: {e}")))?;
        self.file = Some(file);
        result
    }
}

/// Opens a capture for reading, with the file name in every error.
pub fn open(path: &Path) -> Result<CaptureReader<std::io::BufReader<std::fs::File>>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: cannot open the capture: {e}", path.display()))?;
    CaptureReader::new(std::io::BufReader::with_capacity(1 << 20, file)).map_err(|e| e.with_path(&path.display().to_string()).to_string())
}

/// A header for a new capture of `sources`.
pub fn header(sources: Vec<kvscope_protocol::SourceInfo>, note: Option<String>) -> CaptureHeader {
    CaptureHeader { created_unix_nanos: crate::time::unix_nanos(), kvscope_version: env!("CARGO_PKG_VERSION").to_owned(), sources, note }
}
