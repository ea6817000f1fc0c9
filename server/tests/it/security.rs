//! The safe defaults, each refused case asserted: beyond loopback without a token, a missing
//! or wrong token, a foreign Origin, a non-loopback Host (DNS rebinding), an oversized client
//! message; and only embedded assets are served, with the right content types.

use std::process::Command;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

fn unused_workers() -> String {
    format!("0=tcp://127.0.0.1:{}", free_port())
}

#[test]
fn listening_beyond_loopback_without_a_token_is_refused_with_the_fix() {
    let out = Command::new(BIN)
        .args(["serve", "--workers", &unused_workers(), "--listen", "0.0.0.0:0"])
        .env_remove("KVSCOPE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: --listen 0.0.0.0:0 is beyond loopback: anyone who can reach it would read every engine's stream. \
         Pass --token SECRET (or set KVSCOPE_TOKEN) so that /ws and /metrics require it, or listen on 127.0.0.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_ws_and_metrics_require_it() {
    let server = Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0", "--token", "s3cret"]);
    assert!(server.stdout_lines.iter().any(|l| l.ends_with("/?token=s3cret")), "{:?}", server.stdout_lines);
    let (status, _, body) = http_get(&server.addr, "/metrics", &[]).await;
    assert_eq!(status, 401);
    assert_eq!(body, "/metrics requires this server's --token; pass Authorization: Bearer TOKEN or ?token=TOKEN\n");
    assert_eq!(http_get(&server.addr, "/metrics", &[("Authorization", "Bearer wrong")]).await.0, 401);
    assert_eq!(http_get(&server.addr, "/metrics", &[("Authorization", "Bearer s3cret")]).await.0, 200);
    assert_eq!(http_get(&server.addr, "/metrics?token=s3cret", &[]).await.0, 200);
    assert_eq!(http_get(&server.addr, "/frame?source=0&seq=0&recv=0", &[]).await.0, 401, "/frame is guarded like /ws");
    assert_eq!(http_get(&server.addr, "/frame?source=0&seq=0&recv=0&token=s3cret", &[]).await.0, 404);

    let err = ws_connect(&server.ws_url(), &[]).await.unwrap_err().to_string();
    assert!(err.contains("401"), "{err}");
    let err = ws_connect(&format!("{}?token=nope", server.ws_url()), &[]).await.unwrap_err().to_string();
    assert!(err.contains("401"), "{err}");
    let mut ws = ws_connect(&format!("{}?token=s3cret", server.ws_url()), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    let mut ws = ws_connect(&server.ws_url(), &[("Authorization", "Bearer s3cret")]).await.unwrap();
    read_preamble(&mut ws).await;
    let m = server.metrics_with_token("s3cret").await;
    assert_eq!(metric_value(&m, "kvscope_ws_rejected_total{source=\"\",kind=\"token\"}"), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_the_allow_list_admits_one() {
    let server =
        Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0", "--allow-origin", "http://dash.example:3000"]);
    let (status, _, body) = raw_upgrade(&server.addr, &server.addr, Some("http://evil.example")).await;
    assert_eq!(status, 403);
    assert_eq!(
        body.trim(),
        format!(
            "WebSocket refused: Origin \"http://evil.example\" is not this server ({}); a page of another site may not read \
             the stream. To allow it, start kvscope with --allow-origin http://evil.example",
            server.addr
        )
    );
    // Same origin, an allowed origin, and no Origin at all (not a browser) are accepted.
    assert_eq!(raw_upgrade(&server.addr, &server.addr, Some(&format!("http://{}", server.addr))).await.0, 101);
    assert_eq!(raw_upgrade(&server.addr, &server.addr, Some("http://dash.example:3000")).await.0, 101);
    assert_eq!(raw_upgrade(&server.addr, &server.addr, None).await.0, 101);
    // A port differs: another origin.
    assert_eq!(raw_upgrade(&server.addr, &server.addr, Some("http://127.0.0.1:1")).await.0, 403);
    assert_eq!(server.metric("kvscope_ws_rejected_total{source=\"\",kind=\"origin\"}").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_host_is_refused_without_a_token() {
    let server = Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0"]);
    // DNS rebinding: a hostile name resolving to 127.0.0.1; its pages are "same origin" with it.
    let (status, _, body) = raw_upgrade(&server.addr, "rebind.example:80", Some("http://rebind.example:80")).await;
    assert_eq!(status, 403);
    assert!(body.starts_with("/ws refused: Host \"rebind.example:80\" is not a loopback name"), "{body}");
    assert_eq!(raw_upgrade(&server.addr, "localhost:80", Some("http://localhost:80")).await.0, 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_a_loopback_listener_refuses_a_rebinding_host() {
    let server = Server::start(&[
        "serve",
        "--workers",
        &unused_workers(),
        "--listen",
        "127.0.0.1:0",
        "--token",
        "s3cret",
        "--allow-origin",
        "http://dash.example:3000",
    ]);
    let bearer = [("Authorization", "Bearer s3cret")];
    for path in ["/", "/index.html", "/metrics", "/healthz", "/worker/0"] {
        // The token does not help a rebinding page that got hold of it: the name is wrong.
        let (status, _, body) = http_get_as(&server.addr, "rebind.example:80", path, &bearer).await;
        assert_eq!(status, 403, "{path}");
        assert_eq!(
            body,
            format!(
                "{path} refused: Host \"rebind.example:80\" is not a loopback name; open the dashboard at \
                 http://127.0.0.1:PORT, or start kvscope with --allow-origin http://rebind.example:80 to allow that name\n"
            )
        );
        for host in ["localhost:80", "127.0.0.1", "[::1]:8080", "DASH.example:3000"] {
            assert_eq!(http_get_as(&server.addr, host, path, &bearer).await.0, 200, "{path} as {host}");
        }
    }
    // No Host at all is refused too (HTTP/1.1 requires one; a browser always sends it).
    assert_eq!(http_get_as(&server.addr, "", "/metrics", &bearer).await.0, 403);
    // Loopback with the wrong token: the Host passes, the token does not.
    assert_eq!(http_get_as(&server.addr, "localhost:1", "/metrics", &[("Authorization", "Bearer no")]).await.0, 401);
    let m = server.metrics_with_token("s3cret").await;
    assert_eq!(metric_value(&m, "kvscope_http_rejected_total{source=\"\",kind=\"host\"}"), 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_client_message_closes_that_client_only() {
    let server = Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0", "--max-ws-message-bytes", "1KiB"]);
    let mut big = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut big).await;
    let mut other = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut other).await;
    wait_until(Duration::from_secs(10), || async { server.metric("kvscope_clients").await == 2.0 }).await;
    big.send(Message::Binary(vec![0u8; 4096].into())).await.unwrap();
    // The server closes the connection with 1009 (message too big), then the socket ends.
    let close = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match big.stream.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await;
    assert_eq!(close, Ok(Some(1009)), "the oversized sender was told why and disconnected");
    assert!(wait_until(Duration::from_secs(10), || async { server.metric("kvscope_clients").await == 1.0 }).await);
    // Small messages from the other client are fine.
    other.send(Message::Binary(vec![0u8; 16].into())).await.unwrap();
    assert_eq!(server.metric("kvscope_clients").await, 1.0);
}

/// A plain GET of `/ws` says what the endpoint is; a client's ping is answered with its payload,
/// between the stream's messages; a close is answered with a close.
async fn said(ws: &mut Ws) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
    tokio::time::timeout(Duration::from_secs(10), ws.stream.next()).await.expect("an answer within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_is_answered_and_a_close_is_returned() {
    let server = Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0"]);
    let (status, _, body) = http_get(&server.addr, "/ws", &[]).await;
    assert_eq!(status, 400, "a plain GET of /ws: {body}");
    assert!(body.starts_with("this is kvscope's WebSocket endpoint: open it with a WebSocket client"), "{body}");
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    ws.stream.send(Message::Ping(b"are you there".to_vec().into())).await.unwrap();
    loop {
        match said(&mut ws).await {
            Some(Ok(Message::Pong(payload))) => {
                assert_eq!(&payload[..], b"are you there");
                break;
            }
            Some(Ok(Message::Binary(_))) => continue,
            other => panic!("a pong, not {other:?}"),
        }
    }
    ws.stream.send(Message::Close(None)).await.unwrap();
    loop {
        match said(&mut ws).await {
            Some(Ok(Message::Close(frame))) => {
                assert_eq!(frame.map(|f| u16::from(f.code)), Some(1000), "a normal close");
                break;
            }
            Some(Ok(Message::Binary(_))) => continue,
            other => panic!("a close, not {other:?}"),
        }
    }
    assert!(wait_until(Duration::from_secs(10), || async { server.metric("kvscope_clients").await == 0.0 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_embedded_assets_are_served_and_deep_links_get_the_app() {
    let server = Server::start(&["serve", "--workers", &unused_workers(), "--listen", "127.0.0.1:0"]);
    for path in ["/", "/worker/0/tiers", "/../../../../etc/passwd", "/%2e%2e/Cargo.toml", "/index.html"] {
        let (status, headers, body) = http_get(&server.addr, path, &[]).await;
        assert_eq!(status, 200, "{path}");
        let ct = headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.as_str());
        assert_eq!(ct, Some("text/html; charset=utf-8"), "{path}");
        assert!(!body.contains("root:") && !body.contains("[package]"), "{path} leaked a file");
        if !kvscope::assets::dashboard_built() {
            assert_eq!(body, kvscope::assets::NOT_BUILT_PAGE, "{path}");
        }
    }
    let (status, headers, body) = http_get(&server.addr, "/healthz", &[]).await;
    assert_eq!(status, 200);
    assert!(body.starts_with("ok\n"));
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/plain")));
    // OpenMetrics for scrapers that ask for it (Prometheus does), the 0.0.4 text format otherwise.
    let (_, headers, body) = http_get(&server.addr, "/metrics", &[("Accept", "application/openmetrics-text;version=1.0.0")]).await;
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v == "application/openmetrics-text; version=1.0.0; charset=utf-8"));
    assert!(body.ends_with("# EOF\n"));
    let (_, headers, body) = http_get(&server.addr, "/metrics", &[]).await;
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v == "text/plain; version=0.0.4; charset=utf-8"));
    assert!(!body.contains("# EOF") && body.contains("# TYPE kvscope_frames_total counter\n"), "{body}");
}

/// A hand-written upgrade request, to control Host and Origin: (status, headers, body).
async fn raw_upgrade(addr: &str, host: &str, origin: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    if let Some(o) = origin {
        req.push_str(&format!("Origin: {o}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    // Read the response head (and a short body, for refusals).
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf[got..])).await.unwrap().unwrap();
        got += n;
        let text = String::from_utf8_lossy(&buf[..got]);
        if n == 0 || (text.contains("\r\n\r\n") && (text.starts_with("HTTP/1.1 101") || text.contains("refused"))) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf[..got]).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let headers = head.lines().skip(1).filter_map(|l| l.split_once(": ").map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))).collect();
    (status, headers, body.to_owned())
}
