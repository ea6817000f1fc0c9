//! The query string: read once at start, written back whenever the settings change
//! (`History::replaceState`, so the back button is not flooded).

use kvscope_engine_protocol::Settings;

/// Settings from the page's current URL.
pub fn read_settings() -> Settings {
    let search = web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default();
    Settings::from_query(&search)
}

/// Writes the settings into the URL without reloading. Keeps a `token` parameter (it is for
/// the server, not a setting).
pub fn write_settings(settings: &Settings) {
    let Some(window) = web_sys::window() else { return };
    let location = window.location();
    let search = location.search().unwrap_or_default();
    let token = web_sys::UrlSearchParams::new_with_str(&search).ok().and_then(|p| p.get("token"));
    let mut query = settings.to_query();
    if let Some(t) = token {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str("token=");
        query.push_str(&String::from(js_sys::encode_uri_component(&t)));
    }
    if query == search.trim_start_matches('?') {
        return;
    }
    let path = location.pathname().unwrap_or_else(|_| "/".to_owned());
    let url = if query.is_empty() { path } else { format!("{path}?{query}") };
    if let Ok(history) = window.history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

/// `ws://host/ws` for the page's own origin (`wss://` under https), keeping a `token` query
/// parameter of the page so that a token-protected server works from a shared link. Computed
/// here, where the page's location is: the engine's worker has its own.
pub fn default_ws_url() -> Option<String> {
    let location = web_sys::window()?.location();
    let protocol = location.protocol().ok()?;
    let host = location.host().ok()?;
    if host.is_empty() || protocol == "file:" {
        return None;
    }
    let scheme = if protocol == "https:" { "wss" } else { "ws" };
    let search = location.search().unwrap_or_default();
    let token = web_sys::UrlSearchParams::new_with_str(&search).ok().and_then(|p| p.get("token"));
    Some(match token {
        Some(t) => format!("{scheme}://{host}/ws?token={}", js_sys::encode_uri_component(&t)),
        None => format!("{scheme}://{host}/ws"),
    })
}
