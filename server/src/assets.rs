//! The dashboard's files, embedded in the binary from `dist/` (Trunk's output).
//!
//! Only these embedded files are served: there is no directory on disk behind the server, so a
//! path can never reach outside the app. Unknown paths get `index.html`, so the app's deep links
//! work. When the binary was built without `dist/index.html` (no wasm toolchain at hand), every
//! page is a short note naming the command that builds the dashboard; `/ws`, `/metrics` and
//! `/healthz` still work. `build.rs` turns that into a build error when `KVSCOPE_REQUIRE_WEB=1`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "../dist"]
#[allow_missing = true]
struct Dist;

/// The page served when the dashboard was not built into this binary.
pub const NOT_BUILT_PAGE: &str = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kvscope</title></head>\n<body>\n\
<h1>kvscope: the dashboard is not built into this binary</h1>\n\
<p>This <code>kvscope</code> was compiled before the web app existed in <code>dist/</code>.\n\
Build the dashboard with <code>scripts/build-web.sh</code>, then rebuild the server\n\
(<code>cargo build --release -p kvscope</code>).</p>\n\
<p>The server itself works: <a href=\"/metrics\">/metrics</a>, <a href=\"/healthz\">/healthz</a>, and the\n\
WebSocket at <code>/ws</code>.</p>\n</body></html>\n";

/// True when `dist/index.html` was embedded.
pub fn dashboard_built() -> bool {
    Dist::get("index.html").is_some()
}

/// The content type of an embedded file, by extension.
pub fn content_type(path: &str) -> String {
    // mime_guess knows these too; spelled out for the ones a browser refuses to run otherwise.
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("wasm") => "application/wasm".to_owned(),
        Some("js" | "mjs") => "text/javascript; charset=utf-8".to_owned(),
        Some("html") => "text/html; charset=utf-8".to_owned(),
        Some("css") => "text/css; charset=utf-8".to_owned(),
        _ => mime_guess::from_path(path).first_or_octet_stream().essence_str().to_owned(),
    }
}

/// True for a file whose name carries its content's hash, as Trunk names the page's wasm, js
/// and css (`kvscope-web-dcf6c1840ff3fe63_bg.wasm`): 16 hex digits after a `-`.
pub fn content_addressed(name: &str) -> bool {
    name.split(['-', '_', '.']).any(|part| part.len() == 16 && part.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Serves an embedded file, `index.html` for unknown paths, or the not-built page.
pub async fn serve(uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().trim_start_matches('/');
    let (name, file) = match Dist::get(path).filter(|_| !path.is_empty()) {
        Some(file) => (path.to_owned(), file),
        None => match Dist::get("index.html") {
            Some(file) => ("index.html".to_owned(), file),
            None => {
                return (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
                    NOT_BUILT_PAGE,
                )
                    .into_response();
            }
        },
    };
    let etag = format!("\"{}\"", file.metadata.sha256_hash().iter().take(16).map(|b| format!("{b:02x}")).collect::<String>());
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    // A file whose name carries its content's hash never changes under that name; any other
    // (index.html, the engine worker's files, which must keep their names) is revalidated, so
    // a new build never runs beside the last one's cached worker.
    let cache = if content_addressed(&name) { "public, max-age=3600" } else { "no-cache" };
    let mut response = Response::new(Body::from(file.data.into_owned()));
    let h = response.headers_mut();
    // Both are ASCII (a MIME essence, quoted hex); one that were not would just go unsent.
    if let Ok(v) = HeaderValue::from_str(&content_type(&name)) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wasm_and_scripts_get_the_types_browsers_require() {
        assert_eq!(content_type("kvscope-web_bg.wasm"), "application/wasm");
        assert_eq!(content_type("a/kvscope-web.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("x.svg"), "image/svg+xml");
        assert_eq!(content_type("noext"), "application/octet-stream");
    }

    #[test]
    fn only_files_named_by_their_hash_are_cached_without_asking() {
        assert!(content_addressed("kvscope-web-dcf6c1840ff3fe63_bg.wasm"));
        assert!(content_addressed("kvscope-web-dcf6c1840ff3fe63.js"));
        assert!(content_addressed("style-51570deecfc6919a.css"));
        assert!(!content_addressed("index.html"));
        assert!(!content_addressed("kvscope-engine_loader.js"), "the worker keeps its name across builds");
        assert!(!content_addressed("kvscope-engine_bg.wasm"));
    }
}
