//! Asks the server's history for one frame's raw bytes (`/frame`): the only file that fetches
//! over HTTP. The engine keeps every event's record but only its most recent frames' bytes; the
//! inspector asks here for the rest.

use wasm_bindgen_futures::JsFuture;

use crate::model::FrameKey;

/// The `/frame` URL on the server behind `ws_url` (`ws://host/ws?token=T` gives
/// `http://host/frame?token=T&source=..`), keeping the token so a protected server answers.
pub fn frame_url(ws_url: &str, key: FrameKey) -> Option<String> {
    let (scheme, rest) = if let Some(r) = ws_url.strip_prefix("wss://") { ("https", r) } else { ("http", ws_url.strip_prefix("ws://")?) };
    let host = rest.split(['/', '?']).next().filter(|h| !h.is_empty())?;
    let token = rest.split_once('?').and_then(|(_, q)| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
    let mut url = format!("{scheme}://{host}/frame?source={}&seq={}&recv={}", key.source, key.seq, key.recv_time_nanos);
    if let Some(t) = token {
        url.push_str("&token=");
        url.push_str(t);
    }
    Some(url)
}

/// GETs `url`; the body's bytes, or the server's (or the network's) words for why not.
pub async fn get_bytes(url: &str) -> Result<Vec<u8>, String> {
    let response = crate::scope::fetch(url).await?;
    if !response.ok() {
        let status = response.status();
        let text = match response.text() {
            Ok(p) => JsFuture::from(p).await.ok().and_then(|t| t.as_string()).unwrap_or_default(),
            Err(_) => String::new(),
        };
        return Err(format!("the server answered {status}: {}", text.trim()));
    }
    let buffer = response.array_buffer().map_err(|e| crate::scope::js_text(&e))?;
    let buffer = JsFuture::from(buffer).await.map_err(|e| format!("reading the answer failed: {}", crate::scope::js_text(&e)))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_url_is_the_websockets_server_with_its_token() {
        let key = FrameKey { source: 3, seq: 17, recv_time_nanos: 42 };
        assert_eq!(frame_url("ws://127.0.0.1:8080/ws", key).as_deref(), Some("http://127.0.0.1:8080/frame?source=3&seq=17&recv=42"));
        assert_eq!(
            frame_url("wss://kv.example/ws?token=s%20t", key).as_deref(),
            Some("https://kv.example/frame?source=3&seq=17&recv=42&token=s%20t")
        );
        assert_eq!(frame_url("http://x/ws", key), None);
        assert_eq!(frame_url("ws:///ws", key), None);
    }
}
