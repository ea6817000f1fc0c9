//! Tier trees: per worker and tier, the prefix tree of blocks, summarised as an icicle sized by
//! block count (largest subtrees first, the rest folded into "+N more"), with drill-down and
//! hover details; A's and B's trees side by side per tier (empty tiers collapsed), each
//! consistency counter explained and opening the events behind it, and a search by block hash
//! across every worker, tier and policy. The engine lays all of it out (`summarize::trees`);
//! the drill-down root is the page's, sent with its view.

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::label::StorageTier;
use kvscope_engine_protocol::view::{HashSearch, IcicleCell};
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::thousands;

fn render(cell: IcicleCell, root: RwSignal<Option<u64>>, hover: RwSignal<String>) -> AnyView {
    let n = &cell;
    let label = cell.label.clone();
    let hash = cell.hash;
    let title = cell.title.clone();
    let t2 = title.replace('\n', " · ");
    let t3 = t2.clone();
    let (blocks, hidden_children, hidden_blocks) = (n.blocks, n.hidden_children, n.hidden_blocks);
    let router_lacks = cell.router_lacks;
    let kids = cell.kids;
    let hidden = (hidden_children > 0).then(|| {
        view! {
            <div class="icicle-col hidden-kids" style:flex-grow=hidden_blocks.max(1).to_string()>
                <span
                    class="icicle-more"
                    title=format!("{hidden_children} more subtrees below, {hidden_blocks} blocks in all: click a block to drill down")
                >
                    {format!("+{hidden_children} more · {hidden_blocks} blocks")}
                </span>
            </div>
        }
    });
    view! {
        <div class="icicle-col" style:flex-grow=blocks.max(1).to_string()>
            <button
                class="icicle-node"
                class:virtual=hash.is_none()
                class:router-lacks=router_lacks
                data-router-lacks=router_lacks.then_some("true")
                title=title
                on:mouseenter=move |_| hover.set(t2.clone())
                on:focus=move |_| hover.set(t3.clone())
                on:click=move |_| if let Some(h) = hash { root.set(Some(h)) }
            >
                {label}
            </button>
            {(!kids.is_empty() || hidden_children > 0).then(|| view! {
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
    let trees = Memo::new(move |_| fleet.read(Part::Trees, |p| p.trees.clone()));
    // The drill-down root is the page's (the engine lays out the subtree under it).
    let root = fleet.drill;
    let hover = RwSignal::new(String::new());
    let set_tree = move |key: String, tier: &str| {
        root.set(None);
        let tier = tier.to_owned();
        fleet.settings.update(|s| s.tree = Some((key, tier)));
    };
    // Memos, so that a summary re-renders none of the options: at 512 sources, one reactive
    // `selected` per option re-run on every flush cost more than the rest of the page.
    let source_options = Memo::new(move |_| fleet.read(Part::Meta, |p| p.meta.sources.clone()));
    let current_key_memo = Memo::new(move |_| trees.with(|t| t.shown.as_ref().map(|s| s.0.clone())).unwrap_or_default());
    let current_key = move || current_key_memo.get();
    let current_tier_memo = Memo::new(move |_| trees.with(|t| t.shown.as_ref().map_or(StorageTier::Device, |s| s.1)));
    let current_tier = move || current_tier_memo.get();
    let tree_side = move || fleet.read(Part::Meta, |p| p.meta.trees_side);
    let set_side = move |side: Side| fleet.update_settings(|s| s.trees = Some(side));

    // Each piece re-renders when its own data changed: a growing tree changes its counts at
    // every summary, its icicle less often, the A-beside-B table and the search rarely.
    let head = Memo::new(move |_| trees.with(|t| (t.shown.is_some(), t.has_tree, t.head.clone())));
    let counters = Memo::new(move |_| trees.with(|t| t.counters.clone()));
    let cells = Memo::new(move |_| trees.with(|t| (t.drilled.clone(), t.icicle.clone())));
    let sides = Memo::new(move |_| trees.with(|t| (t.shown.is_some(), t.sides.clone(), t.empty_tiers.clone())));
    let search = Memo::new(move |_| trees.with(|t| t.search.clone()));
    let icicle = move || {
        let (shown, has_tree, head) = head.get();
        if !shown {
            return view! { <p class="empty">{head}</p> }.into_any();
        }
        if !has_tree {
            return view! { <p class="tree-summary" data-testid="tree-summary">{head}</p> }.into_any();
        }
        let counters = move || {
            counters
                .get()
                .into_iter()
                .map(|c| {
                    let kept = c.kept;
                    view! {
                        <li data-testid="tree-counter" data-counter=c.key.clone() class:nonzero={c.count > 0}>
                            <strong>{c.title}</strong>
                            {format!(": {}", c.sentence)}
                            {c.first_event.map(|id| view! {
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
                .collect_view()
        };
        let drilled = move || {
            cells.with(|c| c.0.clone()).map(|h| {
                view! {
                    <p>
                        {format!("Drilled into {h}. ")}
                        <button on:click=move |_| root.set(None)>"Back to all roots"</button>
                    </p>
                }
            })
        };
        view! {
            <p class="tree-summary" data-testid="tree-summary">{head}</p>
            <ul class="tree-counters">{counters}</ul>
            {drilled}
            <div class="icicle" role="tree" aria-label="Block tree sized by block count, largest subtrees first; click a block to drill down">
                {move || cells.with(|c| c.1.clone()).map(|c| render(c, root, hover))}
            </div>
        }
        .into_any()
    };

    // A's and B's trees side by side, per tier: what each holds, and what B holds that A does
    // not. Tiers empty under both are collapsed into one line.
    let side_by_side = move || {
        let (shown, rows, empty_tiers) = sides.get();
        if !shown {
            return ().into_any();
        }
        let (pa, pb) = (fleet.policy_name(Side::A), fleet.policy_name(Side::B));
        let rows = rows
            .into_iter()
            .map(|r| {
                let [ta, tb] = r.titles;
                view! {
                    <tr data-testid="tree-tier" data-tier=r.tier.label()>
                        <th scope="row">{r.tier.label()}</th>
                        <td data-policy="a" title=ta>{thousands(r.blocks[0])}</td>
                        <td data-policy="b" title=tb>{thousands(r.blocks[1])}</td>
                        <td>{r.difference}</td>
                    </tr>
                }
            })
            .collect_view();
        let empty: Vec<&str> = empty_tiers.iter().map(|t| t.label()).collect();
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
    };

    let search_results = move || match search.get() {
        HashSearch::None => ().into_any(),
        HashSearch::NotAHash => view! { <p class="error">"Not a hash: give 16 hex digits or a decimal number."</p> }.into_any(),
        HashSearch::NotFound(text) => view! { <p data-testid="hash-results">{text}</p> }.into_any(),
        HashSearch::Hits(hits) => view! {
            <ul data-testid="hash-results">
                {hits
                    .into_iter()
                    .map(|hit| {
                        let (side, tier, parent) = (hit.side, hit.tier, hit.parent);
                        let key = hit.source.clone();
                        view! {
                            <li data-testid="hash-hit" data-policy=side.as_str() data-source=hit.source data-tier=tier.label()>
                                <button on:click=move |_| { set_side(side); set_tree(key.clone(), tier.label()); root.set(parent); }>
                                    {hit.text}
                                </button>
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        }
        .into_any(),
    };

    view! {
        <section class="tier-tree" aria-labelledby="tree-title" data-testid="tier-tree">
            <div class="section-head">
                <h2 id="tree-title">"Tier trees"</h2>
                <label class="field">
                    <span>"Worker"</span>
                    <select on:change=move |ev| set_tree(event_target_value(&ev), current_tier().label())>
                        // Plain attributes, rebuilt when the list or the choice changes: one
                        // reactive `selected` per option was 512 effects at 512 sources.
                        {move || {
                            let current = current_key_memo.get();
                            source_options
                                .get()
                                .into_iter()
                                .map(|k| {
                                    let (selected, value) = (k == current, k.clone());
                                    view! { <option value=value selected=selected>{k}</option> }
                                })
                                .collect_view()
                        }}
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
