//! Step 7: anything left is applied. Its verdicts are `store`, `remove` and `clear`; it words the
//! conversion warnings (short `token_ids`, wrong-size blocks, Dynamo's unpublished blocks).

use std::fmt;

use kvscope_wire::KvEvent;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::label::VerdictLabel;
use kvscope_wire::BlockStored;

use super::COUNTED_FROM_NOW;
use crate::policy::Conversion;
use crate::tier::StorageTier;
use crate::verdict::{Apply, VerdictFlags};
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "7",
    name: "apply",
    checks: "anything left",
    decides: "apply: store (dynamo-1.6.1: only the blocks that fit, none at another block size), remove or clear",
    sentence: "Anything left is applied on its tier: a store inserts its hashes (a conversion warning is \
               noted when token_ids does not hold blocks x block_size tokens; dynamo-1.6.1 publishes no block \
               at another block size and only the leading blocks whose tokens are all there, with one warning), \
               a remove deletes them, a clear wipes every tier of the worker and rank.",
    labels: &[
        LabelText { label: VerdictLabel::Store, one: "store", many: "stores", rest: "applied", routine_filter: false },
        LabelText { label: VerdictLabel::Remove, one: "removal", many: "removals", rest: "applied", routine_filter: false },
        LabelText {
            label: VerdictLabel::Clear,
            one: "clear",
            many: "clears",
            rest: "applied (every tier of the worker and rank wiped)",
            routine_filter: false,
        },
    ],
    enabled: always,
    check: check_apply,
    passed: None,
    decided: Some(decided),
};

/// How many of a store's blocks Dynamo 1.6.1's `create_stored_blocks` publishes: none at another
/// block size; otherwise block `i` needs tokens up to `(i + 1) x block_size`, plus one for
/// bigram pages (whose `n` pairs are `n + 1` tokens).
fn published_blocks(s: &BlockStored, configured: u32) -> (u32, VerdictFlags) {
    let hashes = s.block_hashes.len() as u32;
    let size = s.block_size.unwrap_or(configured);
    if hashes == 0 {
        return (0, VerdictFlags::empty());
    }
    if size != configured {
        return (0, VerdictFlags::BLOCK_SIZE_DIFFERS);
    }
    if size == 0 {
        return (hashes, VerdictFlags::empty());
    }
    let (tokens, lead) = if s.token_ids.is_bigram { (u64::from(s.token_ids.count) + 1, 1) } else { (u64::from(s.token_ids.count), 0) };
    let fit = (tokens - lead) / u64::from(size);
    if fit >= u64::from(hashes) { (hashes, VerdictFlags::empty()) } else { (fit as u32, VerdictFlags::SHORT_TOKEN_IDS) }
}

fn check_apply(cx: &mut EventCtx<'_>) -> Step {
    let kind = match cx.event {
        KvEvent::BlockStored(s) if cx.policy.conversion == Conversion::PublishWhatFits => {
            let (blocks, flags) = published_blocks(s, cx.configured_block_size);
            cx.flags.insert(flags);
            Apply::Store { blocks }
        }
        KvEvent::BlockStored(s) => {
            let blocks = s.block_hashes.len() as u32;
            if blocks > 0 {
                let size = u64::from(s.block_size.unwrap_or(cx.configured_block_size));
                let needed = u64::from(blocks) * size;
                let have = u64::from(s.token_ids.count);
                if have < needed {
                    cx.flags.insert(VerdictFlags::SHORT_TOKEN_IDS);
                } else if have > needed {
                    cx.flags.insert(VerdictFlags::WRONG_SIZE_BLOCK);
                }
            }
            Apply::Store { blocks }
        }
        KvEvent::BlockRemoved(r) => Apply::Remove { blocks: r.block_hashes.len() as u32 },
        KvEvent::AllBlocksCleared { .. } => Apply::Clear,
        // Step 1 decided these already; kept total so evaluate() never falls off the end.
        KvEvent::Unknown(_) => return Step::Decide(VerdictKind::Skip(VerdictLabel::IgnoredEvent)),
    };
    Step::Decide(VerdictKind::Apply(kind))
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    let facts = &v.facts;
    let tier = v.tier.unwrap_or(StorageTier::Device);
    match v.kind {
        VerdictKind::Apply(Apply::Store { blocks }) if blocks < facts.blocks || v.flags.contains(VerdictFlags::BLOCK_SIZE_DIFFERS) => {
            write_published_store(v, s.clause()?, blocks)
        }
        VerdictKind::Apply(Apply::Store { blocks }) => {
            let f = s.clause()?;
            match facts.event_block_size {
                Some(size) if size == facts.configured_block_size => {
                    write!(f, "block_size {size} matches -> store {blocks} block{} on {tier}", plural(blocks))?
                }
                // Steps 4 and 5 let an empty store through at any block size.
                Some(size) if blocks == 0 => {
                    write!(f, "block_size {size} != {} but the store is empty -> store 0 blocks on {tier}", facts.configured_block_size)?
                }
                // No preset lets a non-empty one through; a future one might.
                Some(size) => write!(
                    f,
                    "block_size {size} != {}, not checked on this tier -> store {blocks} block{} on {tier}",
                    facts.configured_block_size,
                    plural(blocks)
                )?,
                None => write!(f, "store {blocks} block{} on {tier}", plural(blocks))?,
            }
            write_warning_clause(v, f)
        }
        VerdictKind::Apply(Apply::Remove { blocks }) => write!(s.clause()?, "remove {blocks} block{} from {tier}", plural(blocks)),
        VerdictKind::Apply(Apply::Clear) => s.clause()?.write_str("clear every tier of this worker and rank"),
        // Unknown tags: step 1 decides them first (see check_apply).
        _ => super::ignored_event::decided(v, s),
    }
}

/// `s` when `n != 1`.
fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `(logged, 2 of 3)` or `(not logged: the budget of 3 is spent)`.
fn write_budget_note(v: &Verdict, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if v.flags.contains(VerdictFlags::WARNING_LOGGED) {
        write!(f, "(logged, {} of {})", v.facts.warning_ordinal, v.facts.warning_limit)
    } else {
        write!(f, "(not logged: the budget of {} is spent)", v.facts.warning_limit)
    }
}

/// A `dynamo-1.6.1` store that publishes fewer blocks than it names, and why.
fn write_published_store(v: &Verdict, f: &mut fmt::Formatter<'_>, blocks: u32) -> fmt::Result {
    let facts = &v.facts;
    let tier = v.tier.unwrap_or(StorageTier::Device);
    let size = facts.event_block_size.unwrap_or(facts.configured_block_size);
    let n = facts.blocks;
    if v.flags.contains(VerdictFlags::BLOCK_SIZE_DIFFERS) {
        write!(
            f,
            "block_size {size} != {}: no block is published at another block size -> store 0 of {n} block{} on \
             {tier}; warning block_size_differs ",
            facts.configured_block_size,
            plural(n)
        )?;
    } else {
        let tokens = facts.token_count + u32::from(facts.is_bigram);
        write!(
            f,
            "block_size {size} matches, but token_ids holds {tokens} tokens, enough for {blocks} of {n} block{} -> \
             store {blocks} block{} on {tier}; warning short_token_ids ",
            plural(n),
            plural(blocks)
        )?;
    }
    write_budget_note(v, f)
}

/// `; token_ids has 20 tokens, fewer than 2 blocks x 16 -> warning short_token_ids (logged, 1 of 3)`.
fn write_warning_clause(v: &Verdict, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let facts = &v.facts;
    let (what, name) = if v.flags.contains(VerdictFlags::SHORT_TOKEN_IDS) {
        ("fewer", "short_token_ids")
    } else if v.flags.contains(VerdictFlags::WRONG_SIZE_BLOCK) {
        ("more", "wrong_size_block")
    } else {
        return Ok(());
    };
    let size = facts.event_block_size.unwrap_or(facts.configured_block_size);
    write!(f, "; token_ids has {} tokens, {what} than {} blocks x {size} -> warning {name} ", facts.token_count, facts.blocks)?;
    write_budget_note(v, f)
}

/// kvscope's conversion warning line; `last` when the budget is spent after it.
pub(crate) fn conversion_line(key: impl fmt::Display, v: &Verdict, last: bool) -> String {
    let f = &v.facts;
    let name = if v.flags.contains(VerdictFlags::SHORT_TOKEN_IDS) { "short_token_ids" } else { "wrong_size_block" };
    format!(
        "{key} seq {} event {}: BlockStored token_ids has {} tokens for {} blocks of {} ({name}){}",
        v.seq,
        v.event_index,
        f.token_count,
        f.blocks,
        f.event_block_size.unwrap_or(f.configured_block_size),
        if last { COUNTED_FROM_NOW } else { "" }
    )
}

/// Dynamo 1.6.1's conversion warnings (`create_stored_blocks`), with kvscope's context.
pub(crate) fn dynamo_conversion_line(key: impl fmt::Display, v: &Verdict) -> String {
    let f = &v.facts;
    let size = u64::from(f.event_block_size.unwrap_or(f.configured_block_size));
    let head = format!("{key} seq {} event {}: Block not published.", v.seq, v.event_index);
    if v.flags.contains(VerdictFlags::BLOCK_SIZE_DIFFERS) {
        format!("{head} Block size must be {} tokens to be published. Block size is: {size}", f.configured_block_size)
    } else {
        let lead = u64::from(f.is_bigram);
        let end = u64::from(v.blocks_applied()) * size + lead + size;
        format!("{head} token_ids too short: need {end}, got {}", u64::from(f.token_count) + lead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::*;

    #[test]
    fn apply_stores_removes_and_clears_and_notes_conversion_warnings() {
        let ok = stored(&[1, 2], Some(0), 32, 16, Some("GPU"), Some(0), Some("full_attention"));
        assert_eq!(decide(&Policy::FIXED, 16, &ok).code, "store device 2");
        let short = stored(&[1, 2], None, 20, 16, Some("GPU"), None, None);
        assert_eq!(decide(&Policy::FIXED, 16, &short).code, "store device 2 +short_token_ids");
        let long = stored(&[1, 2], None, 40, 16, Some("GPU"), None, None);
        assert_eq!(decide(&Policy::FIXED, 16, &long).code, "store device 2 +wrong_size_block");
        assert_eq!(decide(&Policy::FIXED, 16, &removed(&[1], Some("CPU"), None)).code, "remove host_pinned 1");
        let clear = KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: None };
        let d = decide(&Policy::LEGACY, 16, &clear);
        assert_eq!((d.code.as_str(), d.text.as_str()), ("clear", "clear every tier of this worker and rank"));
    }
    #[test]
    fn apply_under_dynamo_publishes_only_the_blocks_that_fit() {
        let dynamo = |ev: &KvEvent, bs: u32| decide(&Policy::DYNAMO_1_6_1, bs, ev);
        // Short token_ids: the leading blocks that have their tokens.
        let short = stored(&[1, 2, 3], None, 40, 16, None, None, None);
        let d = dynamo(&short, 16);
        assert_eq!(d.code, "store device 2 +short_token_ids");
        // (The budget note is the normalizer's; tests/regression.rs shows it.)
        assert!(
            d.text.starts_with(
                "no medium -> Device; block_size 16 matches, but token_ids holds 40 tokens, enough for 2 of 3 blocks -> \
                 store 2 blocks on Device; warning short_token_ids "
            ),
            "{}",
            d.text
        );
        // Extra tokens are ignored.
        assert_eq!(dynamo(&stored(&[1], None, 20, 16, None, None, None), 16).code, "store device 1");
        // Another block size, any tier: no blocks.
        let placeholder = stored(&[1], None, 0, 0, Some("CPU"), None, None);
        let d = dynamo(&placeholder, 16);
        assert_eq!(d.code, "store host_pinned 0 +block_size_differs");
        assert!(
            d.text.contains("block_size 0 != 16: no block is published at another block size -> store 0 of 1 block on HostPinned"),
            "{}",
            d.text
        );
        // An empty store at another block size publishes nothing and warns about nothing.
        assert_eq!(dynamo(&stored(&[], None, 0, 8, None, None, None), 16).code, "store device 0");
        // Bigram pages: n pairs are n + 1 tokens, and each block needs one more.
        let mut pairs = stored(&[1], None, 16, 16, None, None, None);
        if let KvEvent::BlockStored(s) = &mut pairs {
            s.token_ids.is_bigram = true;
        }
        assert_eq!(dynamo(&pairs, 16).code, "store device 1");
        if let KvEvent::BlockStored(s) = &mut pairs {
            s.token_ids.count = 15;
        }
        assert_eq!(dynamo(&pairs, 16).code, "store device 0 +short_token_ids");
    }
}
