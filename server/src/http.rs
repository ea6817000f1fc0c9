//! HTTP: `/ws` (the relay), `/metrics`, `/healthz` and the embedded dashboard, with the safe
//! defaults.
//!
//! - Listening beyond loopback needs `--token` (checked in `cli` before binding); with a token,
//!   `/ws` and `/metrics` require it, as `Authorization: Bearer TOKEN` or `?token=TOKEN` (a
//!   browser cannot set headers on a WebSocket, so the page passes it in the URL).
//! - A WebSocket upgrade whose `Origin` is not the server's own (the `Host` it was reached by) or
//!   in `--allow-origin` is refused with 403, so another site open in the same browser cannot
//!   read the stream.
//! - On a loopback listener every route (the dashboard, `/metrics`, `/healthz`, `/ws`) answers
//!   only a loopback `Host` or a host named by `--allow-origin`: a DNS-rebinding page (a hostile
//!   name resolving to 127.0.0.1) is same-origin with its own name, so without this check it
//!   could read `/metrics` or the dashboard's files. Beyond loopback the token guards instead.
//! - `/frame?source=&seq=&recv=` answers one frame from the history, encoded as on `/ws`, for a
//!   page that keeps every event's record but only recent frames' bytes (same token rule).
//! - Incoming WebSocket messages are capped (`--max-ws-message-bytes`): clients have nothing to
//!   send but control frames.
//!
//! Neighbours: `relay` gives each socket its subscription; `assets` serves files; `metrics`
//! renders `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::metrics::{self, KindLabels, Metrics};
use crate::relay::{BATCH_BYTES, BATCH_MESSAGES, Hub, Outgoing};
use crate::ws::Socket;

/// What the HTTP side needs to know.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub token: Option<String>,
    /// Extra origins allowed to open `/ws`, as `scheme://host[:port]`.
    pub allow_origins: Vec<String>,
    pub max_ws_message_bytes: usize,
    /// The listener is on a loopback address: every route then checks the `Host` header.
    pub loopback_listener: bool,
    /// How long the hub gathers live messages into one shared batch after the first: the
    /// latency it adds, traded for fewer WebSocket messages (zero offers each message alone).
    pub batch_window: Duration,
}

impl HttpConfig {
    /// A loopback listener without a token that sends what is queued at once (the relay
    /// benchmarks, and `record`, which serves nothing).
    pub fn loopback(max_ws_message_bytes: usize) -> HttpConfig {
        HttpConfig { token: None, allow_origins: vec![], max_ws_message_bytes, loopback_listener: true, batch_window: Duration::ZERO }
    }

    /// 10 ms: a busy stream reaches a page in at most 100 WebSocket messages a second, and a
    /// page that redraws every 100 ms cannot see the delay.
    pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(10);
}

#[derive(Debug)]
struct AppState {
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    config: HttpConfig,
}

/// The router with every route.
pub fn router(hub: Arc<Hub>, metrics: Arc<Metrics>, config: HttpConfig) -> Router {
    let state = Arc::new(AppState { hub, metrics, config });
    let assets = Router::new().fallback(crate::assets::serve).layer(tower_http::compression::CompressionLayer::new());
    Router::new()
        .route("/ws", get(ws))
        .route("/metrics", get(metrics_route))
        .route("/healthz", get(healthz))
        .route("/frame", get(frame_route))
        .with_state(state.clone())
        .merge(assets)
        .layer(axum::middleware::from_fn_with_state(state, host_guard))
}

/// Refuses any request whose `Host` is not on the allow-list, when listening on loopback.
async fn host_guard(State(state): State<Arc<AppState>>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if state.config.loopback_listener {
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !host_allowed(&state.config, host) {
            let path = request.uri().path().to_owned();
            return refuse(
                &state.metrics,
                StatusCode::FORBIDDEN,
                "host",
                format!(
                    "{path} refused: Host {host:?} is not a loopback name; open the dashboard at http://127.0.0.1:PORT, \
                     or start kvscope with --allow-origin http://{host} to allow that name"
                ),
            );
        }
    }
    next.run(request).await
}

/// A loopback name or address, or the host of an `--allow-origin`.
fn host_allowed(config: &HttpConfig, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    is_loopback_host(&host) || config.allow_origins.iter().filter_map(|o| origin_host(o)).any(|h| h == host)
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Compares without an early exit, so response time does not leak a token's prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn token_ok(config: &HttpConfig, headers: &HeaderMap, query: &TokenQuery) -> bool {
    let Some(want) = &config.token else { return true };
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    [bearer, query.token.as_deref()].into_iter().flatten().any(|given| same(given.as_bytes(), want.as_bytes()))
}

fn refuse(metrics: &Metrics, status: StatusCode, reason: &str, text: String) -> Response {
    let family = if reason == "host" { &metrics.http_rejected } else { &metrics.ws_rejected };
    family.get_or_create(&KindLabels { source: String::new(), kind: reason.to_owned() }).inc();
    tracing::warn!("refused: {text}");
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text + "\n").into_response()
}

/// `host[:port]` of `scheme://host[:port]`, lower-cased.
fn origin_host(origin: &str) -> Option<String> {
    let (_, rest) = origin.split_once("://")?;
    Some(rest.trim_end_matches('/').to_ascii_lowercase())
}

/// True for `localhost`, `127.x.y.z` and `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, p)| if p.chars().all(|c| c.is_ascii_digit()) { h } else { host })
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Checks the Origin of a WebSocket upgrade; `Err` carries the refusal.
fn check_origin(config: &HttpConfig, headers: &HeaderMap) -> Result<(), (&'static str, String)> {
    // The Host itself was checked for every route (`host_guard`).
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    // Non-browser clients send no Origin; they cannot be a page of another site.
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("");
    let origin_l = origin.to_ascii_lowercase();
    let same_origin = origin_host(&origin_l).is_some_and(|h| h == host);
    let listed = config.allow_origins.iter().any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin_l.trim_end_matches('/')));
    if same_origin || listed {
        Ok(())
    } else {
        Err((
            "origin",
            format!(
                "WebSocket refused: Origin {origin:?} is not this server ({host}); a page of another site may not read \
                 the stream. To allow it, start kvscope with --allow-origin {origin}"
            ),
        ))
    }
}

async fn ws(State(state): State<Arc<AppState>>, headers: HeaderMap, Query(query): Query<TokenQuery>, request: Request) -> Response {
    if !token_ok(&state.config, &headers, &query) {
        return refuse(
            &state.metrics,
            StatusCode::UNAUTHORIZED,
            "token",
            "WebSocket refused: this server requires its --token; pass it as ?token=TOKEN or Authorization: Bearer TOKEN".to_owned(),
        );
    }
    if let Err((reason, text)) = check_origin(&state.config, &headers) {
        return refuse(&state.metrics, StatusCode::FORBIDDEN, reason, text);
    }
    let cap = state.config.max_ws_message_bytes;
    match crate::ws::upgrade(request, cap, move |socket| client(socket, state)) {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// Collects the history's already-encoded messages into batches for one newcomer (live
/// messages come from the hub already batched, shared by every client).
#[derive(Debug, Default)]
struct Batcher {
    messages: Vec<bytes::Bytes>,
    bytes: usize,
}

impl Batcher {
    fn is_full(&self) -> bool {
        self.messages.len() >= BATCH_MESSAGES || self.bytes >= BATCH_BYTES
    }

    fn push(&mut self, message: bytes::Bytes) {
        self.bytes += message.len();
        self.messages.push(message);
    }

    /// The WebSocket message for what was pushed (a lone message is sent as itself), or `None`.
    fn take(&mut self, metrics: &Metrics) -> Option<Outgoing> {
        self.bytes = 0;
        if self.messages.is_empty() {
            return None;
        }
        metrics.client_ws_messages.inc();
        metrics.client_protocol_messages.inc_by(self.messages.len() as u64);
        let message = Outgoing::of(std::mem::take(&mut self.messages));
        metrics.ws_history_bytes_copied.inc_by(message.copied() as u64);
        Some(message)
    }
}

/// Queued messages written before one flush of the socket.
const FEED_AT_ONCE: usize = 64;

async fn client(mut socket: Socket, state: Arc<AppState>) {
    let mut sub = state.hub.subscribe();
    let id = sub.id;
    let metrics = &state.metrics;
    let result: std::io::Result<()> = async {
        let mut batch = Batcher::default();
        batch.push(sub.hello.clone());
        for status in std::mem::take(&mut sub.statuses) {
            batch.push(status);
        }
        batch.push(sub.history_start());
        let history: Vec<bytes::Bytes> = sub.history.messages().cloned().collect();
        for message in history {
            batch.push(message);
            if batch.is_full()
                && let Some(m) = batch.take(metrics)
            {
                socket.send(&m, metrics).await?;
            }
        }
        batch.push(sub.history_complete());
        if let Some(m) = batch.take(metrics) {
            socket.send(&m, metrics).await?;
        }
        socket.flush().await?;
        loop {
            tokio::select! {
                biased;
                said = socket.client_says() => {
                    if !socket.answer(said).await {
                        return Ok(());
                    }
                }
                message = sub.recv(metrics) => {
                    let Some(message) = message else { return Ok(()) };
                    // Live messages are the hub's shared batches: sent as they are, what is
                    // queued already in one flush.
                    socket.send(&message, metrics).await?;
                    for _ in 0..FEED_AT_ONCE {
                        let Some(more) = sub.try_recv(metrics) else { break };
                        socket.send(&more, metrics).await?;
                    }
                    socket.flush().await?;
                    if sub.rx.is_empty() && sub.lossy.load(std::sync::atomic::Ordering::Relaxed) {
                        state.hub.deliver_pending_notice(id);
                    }
                }
            }
        }
    }
    .await;
    if let Err(e) = result {
        tracing::debug!(client = id, "WebSocket client gone: {e}");
    }
    state.hub.unsubscribe(id);
    socket.close().await;
}

/// `/frame?source=I&seq=N&recv=NANOS`: which frame the page asks for.
#[derive(Debug, Deserialize)]
struct FrameQuery {
    source: u32,
    seq: u64,
    recv: u64,
    token: Option<String>,
}

/// One frame from the history, encoded as on `/ws` (a [`proto::Frame`] message): the page
/// keeps every event's record but only recent frames' bytes, and asks here for the rest.
async fn frame_route(State(state): State<Arc<AppState>>, headers: HeaderMap, Query(query): Query<FrameQuery>) -> Response {
    if !token_ok(&state.config, &headers, &TokenQuery { token: query.token.clone() }) {
        return (StatusCode::UNAUTHORIZED, "/frame requires this server's --token; pass Authorization: Bearer TOKEN or ?token=TOKEN\n")
            .into_response();
    }
    let key = state.hub.sources().get(query.source as usize).map_or_else(|| format!("source {}", query.source), |s| s.key.clone());
    match state.hub.find_frame(query.source, query.seq, query.recv) {
        Some(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream"), (header::CACHE_CONTROL, "no-store")], bytes).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "{key} seq {} is no longer in the server's history either: it keeps the most recent {} bytes \
                 (raise --history-bytes to keep more, or record with --record to keep everything)",
                query.seq,
                state.hub.config().history_bytes
            ),
        )
            .into_response(),
    }
}

async fn metrics_route(State(state): State<Arc<AppState>>, headers: HeaderMap, Query(query): Query<TokenQuery>) -> Response {
    if !token_ok(&state.config, &headers, &query) {
        return (StatusCode::UNAUTHORIZED, "/metrics requires this server's --token; pass Authorization: Bearer TOKEN or ?token=TOKEN\n")
            .into_response();
    }
    let body = state.metrics.render();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if metrics::wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
    } else {
        ([(header::CONTENT_TYPE, metrics::TEXT_CONTENT_TYPE)], metrics::to_text_format(&body)).into_response()
    }
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let body = format!("ok\nclients {}\n", state.hub.client_count());
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for h in ["localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "127.1.2.3:9", "[::1]:80", "[::1]"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["evil.example", "evil.example:8080", "10.0.0.1:80", "localhost.evil.example", "0.0.0.0:80", ""] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
