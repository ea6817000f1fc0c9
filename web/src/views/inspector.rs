//! The event inspector: decoded fields, the raw payload in hex, and the verdict under policy A
//! and policy B with the rule that decided each.

use kvscope_engine_protocol::view::BytesFromLine;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

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

/// Where the raw bytes came from, and the button that asks for them when this page no longer
/// keeps them.
fn bytes_from_line(id: u64, from: BytesFromLine) -> impl IntoView {
    let fleet = use_fleet();
    let kind = from.kind.key();
    view! {
        <p class=format!("bytes-from bytes-from-{kind}") data-testid="inspector-bytes-from" data-from=kind>
            {from.sentence}
            {from.ask.map(|label| view! {
                " "
                <button data-testid="inspector-fetch" on:click=move |_| fleet.fetch_bytes(id)>{label}</button>
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
    let detail = Memo::new(move |_| fleet.read(Part::Inspector, |p| p.inspector.clone().map(std::sync::Arc::new)));
    let payload_lines = Signal::derive(move || detail.with(|d| d.as_ref().map_or(0, |d| d.payload.len().div_ceil(16))));
    // The engine event beside the RouterEvent it became on the event plane, or the rule that
    // dropped it (only with an event plane).
    let router = move || {
        let r = detail.with(|d| d.as_ref().and_then(|d| d.router.clone()))?;
        Some(view! {
            <div class="router-detail" data-testid="inspector-router">
                <h3><span class="side side-r">"R"</span>{format!(" The router's side ({}'s relay)", r.policy)}</h3>
                <p data-testid="inspector-router-became">{r.became}</p>
                <p>{r.arrived}</p>
                {r.received.map(|t| view! { <p>{t}</p> })}
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
                    view! {
                        <div class="verdicts-ab">
                            {d.verdicts
                                .iter()
                                .enumerate()
                                .map(|(i, v)| {
                                    let side = if i == 0 { "a" } else { "b" };
                                    let kind = v.kind.map_or("none", |k| k.as_str());
                                    view! {
                                        <div class=format!("verdict verdict-{kind}") data-testid=format!("inspector-verdict-{side}") data-kind=kind>
                                            <p>
                                                <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                                                " " <strong>{v.policy.clone()}</strong> ": " <strong>{v.label.clone()}</strong>
                                            </p>
                                            <p class="rule" data-testid=format!("inspector-rule-{side}")>{v.rule.clone()}</p>
                                        </div>
                                    }
                                })
                                .collect_view()}
                        </div>
                        {router}
                        {(!d.index_lines.is_empty()).then(|| view! {
                            <div class="index-detail" data-testid="inspector-index">
                                <h3>"The router's index (Dynamo 1.6.1's, modelled)"</h3>
                                {d.index_lines
                                    .iter()
                                    .map(|(side, text)| {
                                        let side = side.as_str();
                                        view! {
                                            <p data-side=side>
                                                <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                                                " " {text.clone()}
                                            </p>
                                        }
                                    })
                                    .collect_view()}
                            </div>
                        })}
                        <table class="fields" data-testid="inspector-fields">
                            {d.fields
                                .iter()
                                .map(|(k, v)| view! { <tr><th scope="row">{k.clone()}</th><td data-field=k.clone()>{v.clone()}</td></tr> })
                                .collect_view()}
                        </table>
                        {bytes_from_line(d.id, d.bytes_from.clone())}
                        {(!d.payload.is_empty()).then(|| view! {
                            <h3>{format!("Payload: {} bytes (msgpack, the whole batch)", d.payload.len())}</h3>
                            <HexPager payload=d.payload.clone() lines=payload_lines />
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
