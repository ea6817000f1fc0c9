//! The event inspector: decoded fields, the raw payload in hex, and the verdict under policy A
//! and policy B with the rule that decided each.

use kvscope_wire::KvEvent;
use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::{BytesFrom, EventDetail, FetchState};
use crate::views::clock;

/// Hex lines per page: the payload is paged, not scrolled inside the page's own scroll.
const HEX_PAGE_LINES: usize = 24;

/// The payload in hex, a page of [`HEX_PAGE_LINES`] lines at a time.
#[component]
fn HexPager(payload: Vec<u8>, lines: Signal<usize>) -> impl IntoView {
    let page = RwSignal::new(0usize);
    let pages = move || lines.get().div_ceil(HEX_PAGE_LINES).max(1);
    let payload = StoredValue::new(payload);
    view! {
        <div class="hex" data-testid="inspector-hex">
            <p class="hex-pager">
                <button disabled=move || { page.get() == 0 } on:click=move |_| page.update(|p| *p = p.saturating_sub(1))>"◀ earlier bytes"</button>
                {move || format!(" page {} of {} ({} bytes per page) ", page.get() + 1, pages(), HEX_PAGE_LINES * 16)}
                <button disabled=move || { page.get() + 1 >= pages() } on:click=move |_| page.update(|p| *p += 1)>"later bytes ▶"</button>
            </p>
            <pre aria-label="payload bytes in hex">
                {move || {
                    let start = page.get() * HEX_PAGE_LINES;
                    let end = (start + HEX_PAGE_LINES).min(lines.get());
                    payload.with_value(|p| (start..end).map(|i| hex_line(p, i)).collect::<Vec<_>>().join("\n"))
                }}
            </pre>
        </div>
    }
}

/// Where the raw bytes came from, and the button that asks the server for them when this page
/// no longer keeps them.
#[component]
fn BytesFromLine(id: u64, from: BytesFrom, retain_mib: usize) -> impl IntoView {
    let fleet = use_fleet();
    let capture = fleet.with_model(|m| matches!(m.origin, crate::model::Origin::Capture { .. }));
    let kind = match &from {
        BytesFrom::Page => "page",
        BytesFrom::Server => "server",
        BytesFrom::Capture => "capture",
        BytesFrom::Gone(FetchState::Failed(_) | FetchState::NoServer) => "gone",
        BytesFrom::Gone(_) => "not-kept",
    };
    let can_ask = matches!(from, BytesFrom::Gone(FetchState::NotAsked));
    view! {
        <p class=format!("bytes-from bytes-from-{kind}") data-testid="inspector-bytes-from" data-from=kind>
            {from.sentence(retain_mib, capture)}
            {can_ask.then(|| view! {
                " "
                <button data-testid="inspector-fetch" on:click=move |_| fleet.fetch_bytes(id)>
                    {if capture { "Read the raw bytes from the capture file" } else { "Fetch the raw bytes from the server" }}
                </button>
            })}
        </p>
    }
}

/// Scrolls the inspector into view and focuses it (after "open the first fatal").
pub fn scroll_to_inspector() {
    if let Some(el) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("inspector")) {
        el.scroll_into_view();
    }
}

/// The decoded fields as (name, value) rows; wire strings in `{:?}` so `"cpu "` shows its space.
pub fn fields(d: &EventDetail) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("source", d.source_key.clone()),
        ("seq", d.seq.to_string()),
        ("event index", d.index.to_string()),
        ("received", format!("{}{}", clock(d.recv_time_nanos), if d.replayed { " (replayed)" } else { "" })),
        ("topic", format!("{:?}", String::from_utf8_lossy(&d.topic))),
    ];
    if let Some(ts) = d.batch_ts {
        out.push(("batch ts", format!("{ts:.6} s")));
    }
    out.push(("batch dp_rank", d.batch_dp_rank.map_or("none".into(), |r| r.to_string())));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "absent".into());
    match &d.event {
        Some(KvEvent::BlockStored(s)) => {
            out.push(("type", "BlockStored".into()));
            out.push(("block_hashes", hashes(&s.block_hashes)));
            out.push(("parent_block_hash", opt(s.parent_block_hash.map(|h| h.to_string()))));
            out.push(("token_ids", format!("{} {}", s.token_ids.count, if s.token_ids.is_bigram { "pairs" } else { "tokens" })));
            out.push(("block_size", opt(s.block_size.map(|b| format!("{b} tokens")))));
            out.push(("medium", opt(s.medium.as_ref().map(|m| format!("{m:?}")))));
            out.push(("group_idx", opt(s.group_idx.map(|g| g.to_string()))));
            out.push(("kv_cache_spec_kind", opt(s.kv_cache_spec_kind.as_ref().map(|k| format!("{k:?}")))));
            out.push(("lora_id", opt(s.lora_id.map(|l| l.to_string()))));
            out.push(("lora_name", opt(s.lora_name.as_ref().map(|l| format!("{l:?}")))));
            out.push(("locality", opt(s.locality.as_ref().map(|l| format!("{l:?}")))));
            out.push(("encoding", opt(s.encoding.map(|e| format!("{e:?}")))));
        }
        Some(KvEvent::BlockRemoved(r)) => {
            out.push(("type", "BlockRemoved".into()));
            out.push(("block_hashes", hashes(&r.block_hashes)));
            out.push(("medium", opt(r.medium.as_ref().map(|m| format!("{m:?}")))));
            out.push(("group_idx", opt(r.group_idx.map(|g| g.to_string()))));
            out.push(("locality", opt(r.locality.as_ref().map(|l| format!("{l:?}")))));
        }
        Some(KvEvent::AllBlocksCleared { .. }) => out.push(("type", "AllBlocksCleared".into())),
        Some(KvEvent::Unknown(u)) => out.push(("type", format!("unknown tag {:?}", u.tag))),
        None if matches!(d.bytes_from, BytesFrom::Gone(_)) => record_fields(d, &mut out),
        None => out.push(("type", "payload did not decode".into())),
    }
    out
}

/// What the event's record holds, for an event whose bytes are gone.
fn record_fields(d: &EventDetail, out: &mut Vec<(&'static str, String)>) {
    let r = &d.record;
    out.retain(|(k, _)| !matches!(*k, "topic" | "batch dp_rank"));
    out.push(("type", r.kind.as_str().to_owned()));
    if r.blocks > 0 {
        let first = kvscope_wire::BlockHash(r.first_hash).to_string();
        out.push(("block_hashes", if r.blocks > 1 { format!("{first} (+{} more)", r.blocks - 1) } else { first }));
    }
    if r.block_size > 0 {
        out.push(("block_size", format!("{} tokens", r.block_size)));
    }
    if let Some(m) = &d.medium {
        out.push(("medium", format!("{m:?}")));
    }
}

fn hashes(h: &[kvscope_wire::BlockHash]) -> String {
    let shown: Vec<String> = h.iter().take(8).map(|h| h.to_string()).collect();
    if h.len() > 8 { format!("{} (+{} more)", shown.join(" "), h.len() - 8) } else { shown.join(" ") }
}

/// One hex-dump line: offset, 16 bytes, ASCII.
pub fn hex_line(bytes: &[u8], line: usize) -> String {
    let start = line * 16;
    let chunk = &bytes[start.min(bytes.len())..(start + 16).min(bytes.len())];
    let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
    let ascii: String = chunk.iter().map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '.' }).collect();
    format!("{start:08x}  {:<47}  {ascii}", hex.join(" "))
}

#[component]
pub fn Inspector() -> impl IntoView {
    let fleet = use_fleet();
    // Re-read when the selection changes or the model is re-classified (generation); a memo, so
    // that the readers below share one computation per flush.
    let detail = Memo::new_with_compare(
        move |_| {
            fleet.track();
            let id = fleet.selected.get()?;
            fleet.with_model(|m| m.event_detail(id).map(std::sync::Arc::new))
        },
        |_, _| true,
    );
    let payload_lines = Signal::derive(move || detail.with(|d| d.as_ref().map_or(0, |d| d.payload.len().div_ceil(16))));
    let retain_mib = move || fleet.with_model(|m| m.config().retain_bytes / (1024 * 1024));
    // The engine event beside the RouterEvent it became on the event plane, or the rule that
    // dropped it (only with an event plane).
    let router = move || {
        fleet.track();
        let id = fleet.selected.get()?;
        let r = fleet.with_model(|m| m.router_detail(id))?;
        let became = match (&r.published, &r.dropped) {
            (Some(e), _) => format!("became: {}", crate::model::router::describe(e)),
            (None, Some((label, sentence))) => format!("became nothing: {}'s relay drops it ({label}): {sentence}", r.policy),
            (None, None) => "became nothing".to_owned(),
        };
        let arrived = match (&r.difference, &r.published) {
            (Some(d), _) => format!("on the event plane: {d}"),
            (None, Some(_)) => "on the event plane: no difference recorded for it".to_owned(),
            (None, None) => "on the event plane: nothing expected".to_owned(),
        };
        let received = r.received.as_ref().map(|e| format!("arrived instead: {}", crate::model::router::describe(e)));
        Some(view! {
            <div class="router-detail" data-testid="inspector-router">
                <h3><span class="side side-r">"R"</span>{format!(" The router's side ({}'s relay)", r.policy)}</h3>
                <p data-testid="inspector-router-became">{became}</p>
                <p>{arrived}</p>
                {received.map(|t| view! { <p>{t}</p> })}
            </div>
        })
    };
    view! {
        <section id="inspector" class="inspector" aria-labelledby="inspector-title" data-testid="inspector" tabindex="-1">
            <h2 id="inspector-title">"Event inspector"</h2>
            {move || match detail.get() {
                None => view! {
                    <p class="empty">"Click a mark on the timeline, or use “Next fatal”, to open an event."</p>
                }.into_any(),
                Some(d) => {
                    let d2 = d.clone();
                    view! {
                        <div class="verdicts-ab">
                            {d.verdicts
                                .iter()
                                .enumerate()
                                .map(|(i, (policy, class, rule))| {
                                    let side = if i == 0 { "a" } else { "b" };
                                    let kind = class.as_ref().map_or("none", |c| c.kind.as_str());
                                    let label = class.as_ref().map_or("no verdict".to_owned(), |c| c.describe());
                                    view! {
                                        <div class=format!("verdict verdict-{kind}") data-testid=format!("inspector-verdict-{side}") data-kind=kind>
                                            <p>
                                                <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                                                " " <strong>{policy.clone()}</strong> ": " <strong>{label}</strong>
                                            </p>
                                            <p class="rule" data-testid=format!("inspector-rule-{side}")>{rule.clone()}</p>
                                        </div>
                                    }
                                })
                                .collect_view()}
                        </div>
                        {router}
                        <table class="fields" data-testid="inspector-fields">
                            {fields(&d)
                                .into_iter()
                                .map(|(k, v)| view! { <tr><th scope="row">{k}</th><td data-field=k>{v}</td></tr> })
                                .collect_view()}
                        </table>
                        <BytesFromLine id=d.id from=d.bytes_from.clone() retain_mib=retain_mib() />
                        {(!d.payload.is_empty()).then(|| view! {
                            <h3>{format!("Payload: {} bytes (msgpack, the whole batch)", d.payload.len())}</h3>
                            <HexPager payload=d2.payload.clone() lines=payload_lines />
                        })}
                    }.into_any()
                }
            }}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_lines_show_offset_bytes_and_ascii() {
        let bytes: Vec<u8> = (0x41..0x41 + 20).collect();
        assert_eq!(hex_line(&bytes, 0), "00000000  41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f 50  ABCDEFGHIJKLMNOP");
        assert_eq!(hex_line(&bytes, 1), format!("00000010  {:<47}  QRST", "51 52 53 54"));
    }
}
