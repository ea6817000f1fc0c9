//! Tier trees: per worker and tier, the prefix tree of blocks, summarised as an icicle sized by
//! block count (largest subtrees first, the rest folded into "+N more"), with drill-down and
//! hover details; A's and B's trees side by side per tier (empty tiers collapsed), each
//! consistency counter explained and opening the events behind it, and a search by block hash
//! across every worker, tier and policy.

use kvscope_normalize::StorageTier;
use kvscope_tiers::{Consistency, IcicleNode};
use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::settings::Side;
use crate::views::thousands;

/// Children shown per node.
const WIDTH: usize = 12;
/// Levels below the drill-down root.
const DEPTH: u32 = 5;

fn parse_hash(s: &str) -> Option<u64> {
    let s = s.trim().trim_start_matches("0x");
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, 16).ok().or_else(|| s.parse::<u64>().ok())
}

/// A laid-out icicle node: its own box and its children, widths proportional to blocks.
#[derive(Clone, Debug)]
struct Cell {
    node: IcicleNode,
    title: String,
    kids: Vec<Cell>,
}

fn build(nodes: &[IcicleNode], titles: &dyn Fn(&IcicleNode) -> String) -> Option<Cell> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            children[p].push(i);
        }
    }
    fn rec(i: usize, nodes: &[IcicleNode], children: &[Vec<usize>], titles: &dyn Fn(&IcicleNode) -> String) -> Cell {
        Cell { node: nodes[i], title: titles(&nodes[i]), kids: children[i].iter().map(|&c| rec(c, nodes, children, titles)).collect() }
    }
    (!nodes.is_empty()).then(|| rec(0, nodes, &children, titles))
}

fn render(cell: Cell, root: RwSignal<Option<u64>>, hover: RwSignal<String>) -> AnyView {
    let n = cell.node;
    // The first 8 hex digits identify a block among its siblings; the whole hash is in the
    // title and the hover line.
    let label = match n.hash {
        Some(h) => format!("{:08x}… {}", h >> 32, n.blocks),
        None => format!("all roots · {} blocks", n.blocks),
    };
    let title = cell.title.clone();
    let t2 = title.replace('\n', " · ");
    let t3 = t2.clone();
    let kids = cell.kids;
    let hidden = (n.hidden_children > 0).then(|| {
        view! {
            <div class="icicle-col hidden-kids" style:flex-grow=n.hidden_blocks.max(1).to_string()>
                <span
                    class="icicle-more"
                    title=format!("{} more subtrees below, {} blocks in all: click a block to drill down", n.hidden_children, n.hidden_blocks)
                >
                    {format!("+{} more · {} blocks", n.hidden_children, n.hidden_blocks)}
                </span>
            </div>
        }
    });
    view! {
        <div class="icicle-col" style:flex-grow=n.blocks.max(1).to_string()>
            <button
                class="icicle-node"
                class:virtual=n.hash.is_none()
                title=title
                on:mouseenter=move |_| hover.set(t2.clone())
                on:focus=move |_| hover.set(t3.clone())
                on:click=move |_| if let Some(h) = n.hash { root.set(Some(h)) }
            >
                {label}
            </button>
            {(!kids.is_empty() || n.hidden_children > 0).then(|| view! {
                <div class="icicle-kids">
                    {kids.into_iter().map(|k| render(k, root, hover)).collect_view()}
                    {hidden}
                </div>
            })}
        </div>
    }
    .into_any()
}

#[component]
pub fn TierTree() -> impl IntoView {
    let fleet = use_fleet();
    // Which tree: the URL's, else the first source's device tree.
    let selected = move || {
        fleet.track();
        let (tree, tier_filter) = fleet.settings.with(|s| (s.tree.clone(), s.tier_filter.clone()));
        fleet.with_model(|m| {
            let (src, tier) = match tree {
                Some((key, tier)) => (m.source_by_key(&key).map(|s| s.index), StorageTier::from_label(&tier)),
                None => (m.sources().first().map(|s| s.index), None),
            };
            let tier = tier.or_else(|| tier_filter.as_deref().and_then(StorageTier::from_label)).unwrap_or(StorageTier::Device);
            src.map(|s| (s, tier))
        })
    };
    let root = RwSignal::new(None::<u64>);
    let hover = RwSignal::new(String::new());
    let set_tree = move |key: String, tier: &str| {
        root.set(None);
        let tier = tier.to_owned();
        fleet.settings.update(|s| s.tree = Some((key, tier)));
    };
    // Memos, so that a flush re-renders none of the options: at 512 sources, one reactive
    // `selected` per option re-run on every flush cost more than the rest of the page.
    let source_options = Memo::new(move |_| {
        fleet.source_list.track();
        fleet.with_model(|m| m.sources().iter().map(|s| s.key.clone()).collect::<Vec<_>>())
    });
    let current_key_memo =
        Memo::new(move |_| selected().and_then(|(s, _)| fleet.with_model(|m| m.source(s).map(|s| s.key.clone()))).unwrap_or_default());
    let current_key = move || current_key_memo.get();
    let current_tier_memo = Memo::new(move |_| selected().map_or(StorageTier::Device, |(_, t)| t));
    let current_tier = move || current_tier_memo.get();

    let icicle = move || {
        fleet.track();
        let Some((src, tier)) = selected() else {
            return view! { <p class="empty">"No worker yet."</p> }.into_any();
        };
        let drill = root.get();
        fleet.with_model(|m| {
            let trees = m.trees();
            let side = m.config().trees;
            let policy = m.policy_name(side).to_owned();
            let Some(summary) = trees.summary(src, tier) else {
                return view! { <p class="tree-summary" data-testid="tree-summary">{format!("Policy {} {policy}: 0 blocks, nothing applied on {}.", side.as_str().to_uppercase(), tier.label())}</p> }.into_any();
            };
            let c = summary.counters;
            let head = format!(
                "Policy {} {policy}, {}: {} · {} roots · depth {}",
                side.as_str().to_uppercase(),
                tier.label(),
                c.held_explained(summary.blocks),
                thousands(summary.roots as u64),
                summary.max_depth,
            );
            let counters = Consistency::ALL
                .into_iter()
                .map(|k| {
                    let n = k.of(&c);
                    let events = trees.counter_events(src, tier, k).to_vec();
                    let first = events.first().copied();
                    let kept = events.len();
                    view! {
                        <li data-testid="tree-counter" data-counter=k.as_str() class:nonzero={n > 0}>
                            <strong>{format!("{} {}", k.as_str(), thousands(n))}</strong>
                            {format!(": {}", k.sentence())}
                            {first.map(|id| view! {
                                " "
                                <button class="link" data-testid="tree-counter-open" on:click=move |_| {
                                    fleet.select(Some(id));
                                    crate::views::inspector::scroll_to_inspector();
                                }>
                                    {if kept > 1 { format!("open the first of {kept} kept") } else { "open it".to_owned() }}
                                </button>
                            })}
                        </li>
                    }
                })
                .collect_view();
            let titles = |n: &IcicleNode| match n.hash {
                None => "every root of this tier".to_owned(),
                Some(h) => {
                    let info = trees.block(src, tier, h);
                    let parent = info.and_then(|b| b.parent_hash).map_or("none (a root)".to_owned(), |p| format!("{p:016x}"));
                    let bs = m.block_size_of(src, n.seq, h).map_or("unknown (frame not retained)".to_owned(), |b| format!("{b} tokens"));
                    format!("hash {h:016x}\nparent {parent}\nblock_size {bs}\nseq {}\n{} blocks in subtree", n.seq, n.blocks)
                }
            };
            let cell = trees.subtree(src, tier, drill, DEPTH, WIDTH).and_then(|nodes| build(&nodes, &titles));
            view! {
                <p class="tree-summary" data-testid="tree-summary">{head}</p>
                <ul class="tree-counters">{counters}</ul>
                {drill.map(|h| view! {
                    <p>
                        {format!("Drilled into {h:016x}. ")}
                        <button on:click=move |_| root.set(None)>"Back to all roots"</button>
                    </p>
                })}
                <div class="icicle" role="tree" aria-label="Block tree sized by block count, largest subtrees first; click a block to drill down">
                    {cell.map(|c| render(c, root, hover))}
                </div>
            }
            .into_any()
        })
    };

    // A's and B's trees side by side, per tier: what each holds, and what B holds that A does
    // not. Tiers empty under both are collapsed into one line.
    let side_by_side = move || {
        fleet.track();
        let Some((src, _)) = selected() else { return ().into_any() };
        fleet.with_model(|m| {
            let (pa, pb) = (m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned());
            let mut empty = Vec::new();
            let rows = StorageTier::ALL
                .iter()
                .filter_map(|&t| {
                    let (a, b) = (m.trees_of(Side::A).blocks(src, t), m.trees_of(Side::B).blocks(src, t));
                    let (ca, cb) = (m.trees_of(Side::A).counters(src, t), m.trees_of(Side::B).counters(src, t));
                    if a == 0 && b == 0 && ca.stores_applied + ca.removes_applied + cb.stores_applied + cb.removes_applied == 0 {
                        empty.push(t.label());
                        return None;
                    }
                    let diff = b as i64 - a as i64;
                    Some(view! {
                        <tr data-testid="tree-tier" data-tier=t.label()>
                            <th scope="row">{t.label()}</th>
                            <td data-policy="a" title=ca.held_explained(a as usize)>{thousands(a)}</td>
                            <td data-policy="b" title=cb.held_explained(b as usize)>{thousands(b)}</td>
                            <td>{match diff {
                                0 => "the same".to_owned(),
                                d if d > 0 => format!("B holds {} more", thousands(d as u64)),
                                d => format!("A holds {} more", thousands(d.unsigned_abs())),
                            }}</td>
                        </tr>
                    })
                })
                .collect_view();
            view! {
                <table class="tree-sides" data-testid="tree-sides">
                    <caption>"Blocks held per tier, each policy's own trees (hover a count for where the applied blocks went)"</caption>
                    <thead><tr>
                        <th scope="col">"tier"</th>
                        <th scope="col"><span class="side side-a">"A"</span>" "{pa}</th>
                        <th scope="col"><span class="side side-b">"B"</span>" "{pb}</th>
                        <th scope="col">"difference"</th>
                    </tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                {(!empty.is_empty()).then(|| view! { <p class="quiet" data-testid="empty-tiers">{format!("Empty under both policies: {}.", empty.join(", "))}</p> })}
            }
            .into_any()
        })
    };
    let tree_side = move || fleet.with_model(|m| m.config().trees);
    let set_side = move |side: Side| fleet.update_settings(|s| s.trees = Some(side));

    let search_results = move || {
        fleet.track();
        let q = fleet.settings.with(|s| s.hash.clone());
        let Some(h) = parse_hash(&q) else {
            return if q.trim().is_empty() {
                ().into_any()
            } else {
                view! { <p class="error">"Not a hash: give 16 hex digits or a decimal number."</p> }.into_any()
            };
        };
        fleet.with_model(|m| {
            let hits: Vec<_> = [Side::A, Side::B]
                .into_iter()
                .flat_map(|side| m.trees_of(side).search(h).into_iter().map(move |hit| (side, hit)))
                .collect();
            if hits.is_empty() {
                return view! { <p data-testid="hash-results">{format!("{h:016x}: in no tree of either policy.")}</p> }.into_any();
            }
            view! {
                <ul data-testid="hash-results">
                    {hits
                        .into_iter()
                        .map(|(side, (src, tier, n))| {
                            let key = m.source(src).map(|s| s.key.clone()).unwrap_or_default();
                            let k2 = key.clone();
                            let parent = n.parent_hash.filter(|_| n.parent_present);
                            let bs = m.block_size_of(src, n.seq, n.hash);
                            let policy = m.policy_name(side).to_owned();
                            view! {
                                <li data-testid="hash-hit" data-policy=side.as_str() data-source=key.clone() data-tier=tier.label()>
                                    <button on:click=move |_| { set_side(side); set_tree(k2.clone(), tier.label()); root.set(parent); }>
                                        {format!("{} {policy}: {key} {}: seq {}, block_size {}, {} children, parent {}", side.as_str().to_uppercase(), tier.label(), n.seq, bs.map_or("?".into(), |b| b.to_string()), n.children, n.parent_hash.map_or("none".into(), |p| format!("{p:016x}")))}
                                    </button>
                                </li>
                            }
                        })
                        .collect_view()}
                </ul>
            }
            .into_any()
        })
    };

    view! {
        <section class="tier-tree" aria-labelledby="tree-title" data-testid="tier-tree">
            <div class="section-head">
                <h2 id="tree-title">"Tier trees"</h2>
                <label class="field">
                    <span>"Worker"</span>
                    <select on:change=move |ev| set_tree(event_target_value(&ev), current_tier().label())>
                        {move || source_options.get()
                            .into_iter()
                            .map(|k| {
                                let (k2, k3) = (k.clone(), k.clone());
                                view! { <option value=k3 selected=move || current_key_memo.with(|c| *c == k2)>{k}</option> }
                            })
                            .collect_view()}
                    </select>
                </label>
                <label class="field">
                    <span>"Tier"</span>
                    <select on:change=move |ev| {
                        let t = event_target_value(&ev);
                        set_tree(current_key(), &t);
                        fleet.settings.update(|s| s.tier_filter = Some(t));
                    }>
                        {StorageTier::ALL
                            .iter()
                            .map(|t| {
                                let t = *t;
                                view! { <option value=t.label() selected=move || current_tier() == t>{t.label()}</option> }
                            })
                            .collect_view()}
                    </select>
                </label>
                <span class="field" role="group" aria-label="Whose tree the icicle shows">
                    <span>"Icicle of"</span>
                    <button data-testid="tree-side-a" aria-pressed=move || (tree_side() == Side::A).to_string() on:click=move |_| set_side(Side::A)>"A"</button>
                    <button data-testid="tree-side-b" aria-pressed=move || (tree_side() == Side::B).to_string() on:click=move |_| set_side(Side::B)>"B"</button>
                </span>
                <label class="field">
                    <span>"Find block hash"</span>
                    <input
                        type="search"
                        data-testid="hash-search"
                        placeholder="hex, e.g. 0f3a…"
                        prop:value=move || fleet.settings.with(|s| s.hash.clone())
                        on:change=move |ev| { let v = event_target_value(&ev); fleet.settings.update(|s| s.hash = v); }
                    />
                </label>
            </div>
            {search_results}
            {side_by_side}
            {icicle}
            <p class="hover" aria-live="polite">{move || hover.get()}</p>
        </section>
    }
}
