//! Builders for the rule tests: an event in, the deciding rule, code and sentence out.
//!
//! It runs the rules the way the normalizer does ([`evaluate`], then [`verdict_tier`]) without
//! the normalizer, so a rule's test needs nothing above `rules`.

use kvscope_wire::{BlockHash, BlockRemoved, BlockStored, TokenIds, UnknownEvent};

pub use kvscope_wire::{EventEncoding, KvEvent};

use super::{EventCtx, Rejected, evaluate, verdict_tier};
use crate::groups::GroupTable;
use crate::namespaces::NamespaceTable;
pub use crate::policy::Policy;
pub use crate::small::SmallStr;
pub use crate::tier::StorageTier;
pub use crate::verdict::VerdictFlags;
use crate::verdict::{SourceId, Verdict};

pub fn stored(
    hashes: &[u64],
    parent: Option<u64>,
    tokens: u32,
    block_size: u32,
    medium: Option<&str>,
    group_idx: Option<u32>,
    kind: Option<&str>,
) -> KvEvent {
    KvEvent::BlockStored(Box::new(BlockStored {
        block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
        parent_block_hash: parent.map(BlockHash),
        token_ids: TokenIds { count: tokens, is_bigram: false, span: 0..0, outside_u32: false },
        block_size: Some(block_size),
        medium: medium.map(Into::into),
        group_idx,
        kv_cache_spec_kind: kind.map(Into::into),
        encoding: Some(EventEncoding::Map),
        ..Default::default()
    }))
}

pub fn removed(hashes: &[u64], medium: Option<&str>, group_idx: Option<u32>) -> KvEvent {
    KvEvent::BlockRemoved(Box::new(BlockRemoved {
        block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
        medium: medium.map(Into::into),
        group_idx,
        encoding: Some(EventEncoding::Map),
        ..Default::default()
    }))
}

pub fn unknown(tag: &str) -> KvEvent {
    KvEvent::Unknown(UnknownEvent { tag: tag.into(), encoding: EventEncoding::Map })
}

/// What a source remembers between events.
#[derive(Debug, Default)]
pub struct Memory {
    pub groups: GroupTable,
    pub namespaces: NamespaceTable,
}

/// What a test looks at.
#[derive(Debug)]
pub struct Decided {
    pub rule: &'static str,
    pub label: &'static str,
    pub code: String,
    pub text: String,
    pub tier: Option<StorageTier>,
    pub flags: VerdictFlags,
}

pub fn run_rejected(policy: &Policy, block_size: u32, mem: &mut Memory, event: &KvEvent, rejection: Option<Rejected>) -> Decided {
    run_full(policy, block_size, 0, mem, event, rejection.as_ref())
}

pub fn run_with(policy: &Policy, block_size: u32, dp_rank: u32, mem: &mut Memory, event: &KvEvent) -> Decided {
    run_full(policy, block_size, dp_rank, mem, event, None)
}

fn run_full(policy: &Policy, block_size: u32, dp_rank: u32, mem: &mut Memory, event: &KvEvent, rejection: Option<&Rejected>) -> Decided {
    let mut cx = EventCtx::new(event, policy, block_size, dp_rank, &mut mem.groups, &mut mem.namespaces);
    cx.rejection = rejection;
    let (rule, kind) = evaluate(&mut cx);
    let verdict = Verdict {
        source: SourceId(0),
        seq: 0,
        event_index: 0,
        event_type: event.event_type(),
        tier: verdict_tier(policy, &kind, cx.tier),
        kind,
        rule,
        flags: cx.flags,
        facts: cx.facts,
    };
    // One rule, one item: the deciding rule carries the label of what it decided.
    assert!(
        rule.rule().labels.iter().any(|t| t.label == verdict.label()),
        "rule {} decided {}, which it does not list",
        rule.rule().name,
        verdict.label()
    );
    Decided {
        rule: rule.rule().name,
        label: verdict.label().as_str(),
        code: verdict.code().to_string(),
        text: verdict.to_string(),
        tier: verdict.tier,
        flags: verdict.flags,
    }
}

pub fn decide(policy: &Policy, block_size: u32, event: &KvEvent) -> Decided {
    run_with(policy, block_size, 0, &mut Memory::default(), event)
}
