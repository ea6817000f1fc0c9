//! `kvscope check`'s table, rendered from the typed report alone.

use kvscope_normalize::{Outcome, VerdictLabel};

use super::report::CheckReport;

const HEADER: [&str; 12] =
    ["source", "frames", "events", "f.err", "d.err", "gaps", "restarts", "device", "host", "disk", "external", "fatal"];

fn row(cells: [String; 12], last: &str) -> String {
    let [a, b, c, d, e, f, g, h, i, j, k, l] = cells;
    format!("{a:<12} {b:>8} {c:>8} {d:>6} {e:>6} {f:>5} {g:>8} {h:>8} {i:>8} {j:>8} {k:>8} {l:>8}  {last}\n")
}

/// The table: one row per engine source, then the router's lines, the notes (skips, first
/// fatal errors), the verdict, the event planes and the fleet's exit.
pub fn render(r: &CheckReport) -> String {
    let mut table = row(HEADER.map(str::to_owned), "first fatal");
    let mut notes = Vec::new();
    let mut router_lines = Vec::new();
    let mut index_lines = Vec::new();
    for s in &r.sources {
        match &s.router {
            Some(c) => router_lines.push(crate::router::table_line(&s.key, c)),
            None if r.router.is_some() => notes.push(crate::router::not_reconciled_note(&s.key, &s.worker_id)),
            None => {}
        }
        if s.index.blocks.engine_blocks + s.index.blocks.router_blocks > 0 {
            let n = |n: u64| n.to_string();
            index_lines.push(format!("  {}: index: {}; {}", s.key, s.index.blocks_words(n), s.index.cost_words(n)));
        }
        if let Some(real) = &s.index_real {
            let n = |n: u64| n.to_string();
            index_lines.push(format!("  {}: real index: {}; {}", s.key, real.counts.blocks_words(n), real.counts.cost_words(n)));
        }
        let c = &s.counts;
        let a = |t: &str| c.applied.get(t).copied().unwrap_or(0).to_string();
        table.push_str(&row(
            [
                s.key.clone(),
                c.frames.to_string(),
                c.events.to_string(),
                c.frame_errors.to_string(),
                c.decode_errors.to_string(),
                c.gaps.to_string(),
                c.restarts.to_string(),
                a("device"),
                a("host_pinned"),
                a("disk"),
                a("external"),
                s.fatal.count.to_string(),
            ],
            &s.fatal.first_seq.map_or("-".to_owned(), |seq| format!("seq {seq}")),
        ));
        for label in VerdictLabel::ALL.into_iter().filter(|l| l.outcome() == Outcome::Skip) {
            if let Some(&n) = c.skipped.get(&label) {
                notes.push(format!("  {}: {}", s.key, label.summary(n)));
            }
        }
        if let Some(text) = &s.fatal.first_error {
            notes.push(format!("  {text}"));
        }
    }
    for block in [router_lines, index_lines, notes] {
        if !block.is_empty() {
            table.push('\n');
            table.push_str(&block.join("\n"));
            table.push('\n');
        }
    }
    let (policy, block_size) = (r.policy, r.block_size);
    table.push_str(&if r.fatal() {
        format!("\nFATAL under policy {policy} at block size {block_size}: an indexer with this configuration would stop.\n")
    } else {
        format!("\nno fatal verdict under policy {policy} at block size {block_size}.\n")
    });
    for p in &r.event_planes {
        table.push_str(&format!(
            "event plane {}: {} messages from {} publisher(s), {} frame errors, {} gaps ({} lost), {} restarts\n",
            p.key, p.frames, p.publishers, p.frame_errors, p.gaps, p.lost_frames, p.restarts,
        ));
    }
    if let Some(first) = &r.fleet.first_fatal {
        let seq = first.seq.map_or("null".to_owned(), |s| s.to_string());
        table.push_str(&format!(
            "the router's indexer (one for every source) exits at {} seq {seq} ({}); {} later events would stop a restarted one again, {} events arrive after it\n",
            first.source.as_deref().unwrap_or("?"),
            first.utc,
            r.fleet.fatal_after_first_fatal,
            r.fleet.events_after_first_fatal,
        ));
    }
    let i = &r.totals.index;
    table.push_str(&format!(
        "the router's index under {} (Dynamo 1.6.1's, modelled): {}{}\n",
        r.index.policy,
        i.cost_words(|n| n.to_string()),
        if i.is_aligned() { "; it holds what the engines hold" } else { "; it differs from what the engines hold" },
    ));
    for ri in &r.router_indexes {
        table.push_str(&format!(
            "router index {}: {} reads, {} dumps, {} failed{}; {}\n",
            ri.url,
            ri.reads,
            ri.dumps,
            ri.errors,
            ri.first_errors.first().map(|e| format!(" (first: {e})")).unwrap_or_default(),
            match (&ri.last_dump_utc, ri.differences) {
                (None, _) => "no dump to compare".to_owned(),
                (Some(t), 0) => format!("its last dump ({t}) holds exactly what the model of Dynamo 1.6.1's index holds"),
                (Some(t), d) => format!("its last dump ({t}) differs from the model on {d} blocks: a finding (see first_differences)"),
            }
        ));
        for d in ri.first_differences.iter().take(5) {
            table.push_str(&format!(
                "  {} {} block {}: real index {}, {}\n",
                d.source.as_deref().unwrap_or("?"),
                d.tier,
                d.block_hash,
                if d.real_holds { "holds it" } else { "lacks it" },
                d.model_says
            ));
        }
    }
    if r.index.refused_blocks > 0 {
        table.push_str(&format!(
            "index bound of {} nodes reached: {} stores and blocks not modelled; the index figures are short of them (raise with \
             --index-max-nodes N)\n",
            r.index.bound, r.index.refused_blocks
        ));
    }
    if let Some(first) = &r.index.first_exit {
        table.push_str(&format!(
            "the indexer exited {} times on fatal verdicts (first at {} seq {}) and restarted with an empty index each time\n",
            r.index.indexer_exits, first.source, first.seq
        ));
    }
    if let Some(router) = &r.router {
        for u in &router.unknown_workers {
            table.push_str(&format!(
                "event plane: {} RouterEvents for worker {} dp_rank {}, which no engine source has (unknown worker)\n",
                u.events, u.worker_id, u.dp_rank
            ));
        }
        for line in kvscope_router::SharedKey::lines(&router.shared_keys, SHARED_KEYS_LISTED) {
            table.push_str(&format!("event plane: {line}\n"));
        }
        let decode_errors: u64 = router.publishers.iter().map(|p| p.decode_errors).sum::<u64>() + router.unattributed_decode_errors;
        if decode_errors > 0 {
            table.push_str(&format!("event plane: {decode_errors} messages whose RouterEvents did not decode\n"));
        }
        table.push_str(&format!(
            "router reconciled under relay policy {} at kv_block_size {}{}\n",
            router.relay_policy,
            router.kv_block_size,
            if router.clean { "" } else { ": the router's view differs from what the relays should have published" }
        ));
    }
    table
}

/// Shared router keys the table names one by one; the rest are one line.
const SHARED_KEYS_LISTED: usize = 8;
