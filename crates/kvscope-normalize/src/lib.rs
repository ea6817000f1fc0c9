//! Decides what a KV router does with each decoded event: storage tier, skip reason or fatal error, under a named policy.
//!
//! What this crate is not: it does not decode bytes (that is `kvscope-wire`, whose
//! [`kvscope_wire::KvEvent`]s it reads), it keeps no block trees (that is `kvscope-tiers`, which
//! applies the verdicts made here and never decides them), and it does no I/O: no sockets, no
//! files, no clocks. It compiles for `wasm32-unknown-unknown`, so the browser classifies with the
//! same code the server runs.
//!
//! - [`StorageTier`] and [`resolve_tier`]: the medium table of docs/rules.md.
//! - [`Policy`]: a named preset of switches (`fixed`, `legacy`, `dynamo-1.6.1`); see [`policy`]
//!   for adding one.
//! - [`VerdictLabel`]: every verdict's label, the one enum every consumer spells verdicts with.
//! - [`rules`]: one item per rule, one file each, in evaluation order ([`rules::RULES`]): check,
//!   words (summary, inspector sentence, log lines) and tests together.
//! - [`Normalizer`]: per-source state; one [`Verdict`] per event, rendered as a sentence on
//!   demand (`verdict.to_string()`), counted in [`SourceCounters`] with rate-limited warning
//!   budgets.
//!
//! Its test-vector table and runner live in `kvscope-corpus` (`kvscope_corpus::vectors`), with
//! the other test support, so this crate exports no test scaffolding.
//!
//! ```
//! use kvscope_encode::{encode_batch, release, Batch, Hash, Stored};
//! use kvscope_normalize::{Normalizer, Policy};
//!
//! let mut n = Normalizer::new(1536, "fixed".parse::<Policy>().unwrap());
//! let w0 = n.source("w0", 0);
//! let store = Stored::new([Hash::U64(7)], 12288).medium(Some("cpu"));
//! let batch = Batch { ts: 0.0, events: vec![store.into()], dp_rank: Some(0) };
//! let payload = encode_batch(&release::VLLM_0_33.layout, &batch).unwrap();
//! let mut verdicts = Vec::new();
//! n.push_payload(w0, 8, &payload, &mut verdicts).unwrap();
//! assert_eq!(verdicts[0].code().to_string(), "offload_block_size_mismatch host_pinned");
//! assert_eq!(
//!     verdicts[0].to_string(),
//!     "medium \"cpu\" -> HostPinned (case-insensitive); block_size 12288 != 1536 on a non-device \
//!      tier -> skip offload_block_size_mismatch"
//! );
//! ```

pub mod batch;
mod counters;
mod groups;
pub mod kind;
pub mod label;
pub mod namespaces;
mod normalizer;
pub mod policy;
pub mod rules;
mod small;
pub mod tier;
mod verdict;

pub use batch::{BatchRejection, RejectReason, RejectionScan};
pub use counters::{BudgetKind, LogLevel, LogLine, NOTICE_LINES_KEPT, NoticeLog, SourceCounters, WARNING_BUDGET, WarningBudget};
pub use groups::{GroupTable, LearnedKind};
pub use kind::{KindClass, classify_kind};
pub use label::{Outcome, UnknownLabel, VerdictLabel};
pub use namespaces::{NamespaceState, NamespaceTable};
pub use normalizer::{Normalizer, PayloadSink, PayloadState, SourceKey};
pub use policy::{
    BatchCheck, BlockSizeCheck, Conversion, GroupRules, LogStyle, MediumMatch, MediumTable, Policy, SelfReference, UnknownMedium,
    UnknownPolicy,
};
pub use rules::{LabelText, RULES, Rejected, Rule, RuleSet, label_text};
pub use small::{SMALL_STR_CAPACITY, SmallStr};
pub use tier::{StorageTier, TierChoice, TierSource, resolve_tier};
pub use verdict::{Apply, Facts, Fatal, GroupCheck, RuleId, SourceId, Verdict, VerdictCode, VerdictFlags, VerdictKind};
