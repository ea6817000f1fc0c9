//! The real peers' harnesses shared by the integration tests: vLLM's own publisher carrying
//! corpus payloads, and the streams it is given.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{peer_python, repo, vllm_kv_events};

/// vLLM 0.33.0's own publisher carrying corpus payloads (see the script's doc).
pub struct Vllm {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
    pub endpoint: String,
}

impl Vllm {
    pub fn start() -> Vllm {
        let mut child = Command::new(peer_python())
            .arg(repo().join("scripts/peers/vllm_corpus_publisher.py"))
            .arg("--kv-events")
            .arg(vllm_kv_events())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start scripts/peers/vllm_corpus_publisher.py");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        let stdin = child.stdin.take();
        let mut v = Vllm { child, stdin, lines, endpoint: String::new() };
        v.endpoint = v.wait("pub").as_str().unwrap().to_owned();
        v
    }

    fn wait(&self, key: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("vllm_corpus_publisher.py printed no {key:?} within 30 s"));
            if let Some(v) = line.get(key) {
                return v.clone();
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Runs the steps, a little apart, and waits until they all went out.
    pub fn run(&mut self, steps: &[Step]) {
        for s in steps {
            match s {
                Step::Publish(file) => {
                    let path = repo().join("tests/fixtures/kv-events").join(file);
                    self.say(&format!("publish {}", path.display()));
                }
                Step::Skip => self.say("skip"),
                Step::Restart => self.say("restart"),
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        self.say("sync");
        self.wait("synced");
    }
}

impl Drop for Vllm {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Debug)]
pub enum Step {
    Publish(String),
    /// A lost frame: the next batch's seq skips one.
    Skip,
    /// The engine restarts: seq from 0 again.
    Restart,
}

pub fn corpus_stream(name: &str) -> Vec<Step> {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/dynamo-indexer").join(format!("{name}.stream.jsonl"))).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Step::Publish(serde_json::from_str::<Value>(l).unwrap()["payload_file"].as_str().unwrap().to_owned()))
        .collect()
}

pub fn kimi(worker: u32, batches: std::ops::RangeInclusive<u32>) -> Vec<Step> {
    batches.map(|i| Step::Publish(format!("vllm-0.33.0/kimi_k3_agg-w{worker}-{i:02}.msgpack"))).collect()
}
