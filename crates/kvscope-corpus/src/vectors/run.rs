//! The runner: [`VectorHost`] (an entry point the vectors run through), what a host reports
//! ([`VectorOutput`]), and [`run_vectors`], which runs every case and compares, into a
//! [`VectorReport`] that fails on zero runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kvscope_normalize::Verdict;

use super::encode::{Frame, build_frames};
use super::{Expect, Vector, policies_of, policy_errors, table};

/// One vector under one policy, as a host receives it.
#[derive(Debug, Clone, Copy)]
pub struct VectorCase<'a> {
    pub vector: &'a str,
    pub policy: &'a str,
    pub block_size: u32,
    pub frames: &'a [Frame],
}

/// One verdict as a host reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutVerdict {
    pub code: String,
    pub text: String,
}

impl OutVerdict {
    pub fn from_verdict(v: &Verdict) -> Self {
        OutVerdict { code: v.code().to_string(), text: v.to_string() }
    }
}

/// One source's counters as a host reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutSource {
    /// `worker:dp_rank`.
    pub source: String,
    pub fatal_count: u64,
    pub first_fatal_seq: Option<u64>,
    pub conversion: [u64; 2],
    pub offload: [u64; 2],
    /// Lines printed every time.
    pub notices: u64,
    /// Live blocks per tier label, if the host keeps trees.
    pub trees: Option<BTreeMap<String, u64>>,
}

/// What a host produced for one case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VectorOutput {
    pub verdicts: Vec<OutVerdict>,
    pub sources: Vec<OutSource>,
}

/// An entry point the vectors run through.
pub trait VectorHost {
    /// For reports: `native`, `wasm`, `wasm-js`.
    fn name(&self) -> &str;
    /// The bytes of a corpus payload by manifest path (hosts link `kvscope-corpus`).
    fn corpus_payload(&self, file: &str) -> Option<Vec<u8>>;
    /// Runs one case from a fresh state: a normalizer for `case.block_size` and `case.policy`,
    /// the frames pushed in order.
    fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String>;
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct VectorReport {
    pub host: String,
    /// Vectors in the table.
    pub vectors: usize,
    /// (vector, policy) cases run.
    pub runs: usize,
    /// Cases with at least one mismatch.
    pub failed_runs: usize,
    /// Tree expectations the host could not check (it keeps no trees).
    pub tree_checks_skipped: usize,
    /// One entry per mismatch, `vector [policy]: what differs`.
    pub failures: Vec<String>,
}

impl VectorReport {
    /// Panics listing every failure, or if no case ran, or if the number of runs is not
    /// `expected_runs`.
    pub fn assert_ok(&self, expected_runs: usize) {
        assert!(self.runs > 0, "host {}: no normalizer vector ran; is vectors/normalizer.json empty?", self.host);
        assert!(
            self.failures.is_empty(),
            "host {}: {} of {} vector runs failed ({} mismatches):\n{}",
            self.host,
            self.failed_runs,
            self.runs,
            self.failures.len(),
            self.failures.join("\n")
        );
        assert_eq!(self.runs, expected_runs, "host {}: ran {} vector cases, expected {expected_runs}", self.host, self.runs);
    }
}

/// Runs every vector under every policy it lists (or every preset).
pub fn run_vectors(host: &mut impl VectorHost) -> VectorReport {
    let table = table();
    let mut report = VectorReport { host: host.name().to_owned(), vectors: table.vectors.len(), ..Default::default() };
    for vector in &table.vectors {
        report.failures.extend(policy_errors(vector));
        let frames = match build_frames(vector, &|f: &str| host.corpus_payload(f)) {
            Ok(frames) => frames,
            Err(e) => {
                report.failures.push(format!("{}: {e}", vector.name));
                continue;
            }
        };
        for policy in policies_of(vector) {
            let Some(expect) = vector.expect.get(policy) else { continue };
            report.runs += 1;
            let before = report.failures.len();
            let case = VectorCase { vector: &vector.name, policy, block_size: vector.block_size, frames: &frames };
            match host.run(&case) {
                Ok(out) => compare(vector, policy, expect, &out, &mut report),
                Err(e) => report.failures.push(format!("{} [{policy}]: host error: {e}", vector.name)),
            }
            if report.failures.len() > before {
                report.failed_runs += 1;
            }
        }
    }
    report
}

fn compare(vector: &Vector, policy: &str, expect: &Expect, out: &VectorOutput, report: &mut VectorReport) {
    let at = format!("{} [{policy}]", vector.name);
    let got: Vec<&str> = out.verdicts.iter().map(|v| v.code.as_str()).collect();
    if got != expect.verdicts {
        let mut msg = format!("{at}: verdicts differ (expected {}, got {}):", expect.verdicts.len(), got.len());
        for i in 0..got.len().max(expect.verdicts.len()) {
            let e = expect.verdicts.get(i).map_or("<none>", String::as_str);
            let g = got.get(i).copied().unwrap_or("<none>");
            let mark = if e == g { " " } else { "!" };
            let _ = write!(msg, "\n  {mark} [{i}] expected {e:?}, got {g:?}");
        }
        report.failures.push(msg);
    }
    for (&i, text) in &expect.text {
        match out.verdicts.get(i) {
            Some(v) if &v.text == text => {}
            Some(v) => report.failures.push(format!("{at}: verdict [{i}] text:\n  expected {text:?}\n  got      {:?}", v.text)),
            None => report.failures.push(format!("{at}: verdict [{i}] text expected, but only {} verdicts", got.len())),
        }
    }
    for (source, se) in &expect.sources {
        let Some(os) = out.sources.iter().find(|s| &s.source == source) else {
            report.failures.push(format!("{at}: source {source} expected, host reported none"));
            continue;
        };
        if let Some((count, seq)) = se.fatal
            && (os.fatal_count, os.first_fatal_seq) != (count, seq)
        {
            report.failures.push(format!(
                "{at}: {source} fatal: expected count {count} first seq {seq:?}, got {} / {:?}",
                os.fatal_count, os.first_fatal_seq
            ));
        }
        if let Some(c) = se.conversion
            && os.conversion != c
        {
            report
                .failures
                .push(format!("{at}: {source} conversion warnings [emitted, suppressed]: expected {c:?}, got {:?}", os.conversion));
        }
        if let Some(o) = se.offload
            && os.offload != o
        {
            report.failures.push(format!("{at}: {source} offload warnings [emitted, suppressed]: expected {o:?}, got {:?}", os.offload));
        }
        if let Some(n) = se.notices
            && os.notices != n
        {
            report.failures.push(format!("{at}: {source} notices: expected {n}, got {}", os.notices));
        }
        if let Some(trees) = &se.trees {
            match &os.trees {
                None => report.tree_checks_skipped += 1,
                Some(got) => {
                    // Tiers not listed must be empty.
                    let mut want = trees.clone();
                    want.retain(|_, n| *n > 0);
                    let mut have = got.clone();
                    have.retain(|_, n| *n > 0);
                    if want != have {
                        report.failures.push(format!("{at}: {source} live blocks per tier: expected {want:?}, got {have:?}"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::case_count;

    /// The runner must fail a host that returns nothing or the wrong thing, not pass it vacuously.
    #[test]
    fn runner_reports_a_host_that_gets_it_wrong() {
        struct Wrong;
        impl VectorHost for Wrong {
            fn name(&self) -> &str {
                "wrong"
            }
            fn corpus_payload(&self, _file: &str) -> Option<Vec<u8>> {
                Some(b"\x90".to_vec())
            }
            fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
                let mut out = VectorOutput::default();
                for f in case.frames {
                    out.verdicts.push(OutVerdict { code: format!("seq {}", f.seq), text: String::new() });
                }
                Ok(out)
            }
        }
        let report = run_vectors(&mut Wrong);
        assert_eq!(report.runs, case_count());
        assert_eq!(report.failed_runs, report.runs, "every case must fail");
        assert!(report.failures[0].contains("verdicts differ"), "{}", report.failures[0]);
        let panic = std::panic::catch_unwind(|| report.assert_ok(report.runs)).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        let head = format!("host wrong: {0} of {0} vector runs failed ({1} mismatches):", report.runs, report.failures.len());
        assert!(message.starts_with(&head), "{message}");
        let empty = VectorReport { host: "empty".into(), ..Default::default() };
        let panic = std::panic::catch_unwind(|| empty.assert_ok(0)).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert_eq!(message, "host empty: no normalizer vector ran; is vectors/normalizer.json empty?");
    }
}
