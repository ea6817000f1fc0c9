//! Dynamo's etcd backend, read through etcd's JSON gateway (`POST /v3/kv/range`, served by
//! every etcd 3.4+ on its client port): no gRPC stack for three range reads per poll.
//!
//! Credentials come from the environment Dynamo's own processes read, so one shell configures
//! both: `ETCD_AUTH_USERNAME` and `ETCD_AUTH_PASSWORD` (a token from `/v3/auth/authenticate`,
//! renewed when etcd refuses it). TLS (`ETCD_AUTH_CA`, `ETCD_AUTH_CLIENT_CERT`) is not read
//! here: a store that needs it fails with a sentence saying so.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

use super::DiscoverOptions;
use crate::http_client::{HttpError, Request};

/// Environment variables Dynamo's runtime reads for etcd, read here the same way.
pub const USERNAME_ENV: &str = "ETCD_AUTH_USERNAME";
pub const PASSWORD_ENV: &str = "ETCD_AUTH_PASSWORD";
pub const CA_ENV: &str = "ETCD_AUTH_CA";

/// A client of one etcd cluster.
#[derive(Debug)]
pub struct Client {
    endpoints: Vec<String>,
    /// The endpoint that answered last; tried first.
    current: usize,
    credentials: Option<(String, String)>,
    token: Option<String>,
    tls_required: bool,
}

#[derive(Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct AuthResponse {
    token: String,
}

impl Client {
    pub fn from_env(endpoints: Vec<String>) -> Client {
        let user = std::env::var(USERNAME_ENV).ok().filter(|u| !u.is_empty());
        let credentials = user.map(|u| (u, std::env::var(PASSWORD_ENV).unwrap_or_default()));
        let tls_required = std::env::var(CA_ENV).is_ok_and(|v| !v.is_empty());
        Client { endpoints, current: 0, credentials, token: None, tls_required }
    }

    /// Every key under `prefix` with its value.
    pub async fn range_prefix(&mut self, prefix: &str, opts: DiscoverOptions) -> Result<Vec<(String, Vec<u8>)>, String> {
        if self.tls_required {
            return Err(format!(
                "{CA_ENV} is set: this etcd needs TLS, which kvscope does not speak yet; read it through Dynamo's file backend or a plain-HTTP listener"
            ));
        }
        let body = serde_json::json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }).to_string();
        let answer = self.post("/v3/kv/range", body.into_bytes(), opts).await?;
        let range: RangeResponse =
            serde_json::from_slice(&answer).map_err(|e| format!("etcd's range answer is not what etcd 3.4+ sends: {e}"))?;
        range
            .kvs
            .into_iter()
            .map(|kv| {
                let key = B64.decode(&kv.key).map_err(|e| format!("a key is not base64: {e}"))?;
                let value =
                    B64.decode(&kv.value).map_err(|e| format!("the value of {:?} is not base64: {e}", String::from_utf8_lossy(&key)))?;
                Ok((String::from_utf8_lossy(&key).into_owned(), value))
            })
            .collect()
    }

    /// Grants a lease of `ttl_secs` seconds; returns its id.
    pub async fn grant(&mut self, ttl_secs: u64, opts: DiscoverOptions) -> Result<i64, String> {
        #[derive(Deserialize)]
        struct Grant {
            #[serde(rename = "ID")]
            id: String,
        }
        let body = serde_json::json!({ "TTL": ttl_secs }).to_string();
        let answer = self.post("/v3/lease/grant", body.into_bytes(), opts).await?;
        let grant: Grant = serde_json::from_slice(&answer).map_err(|e| format!("etcd's lease grant answer has no ID: {e}"))?;
        grant.id.parse().map_err(|_| format!("etcd's lease id {:?} is not a number", grant.id))
    }

    /// Puts `key` = `value` under `lease`.
    pub async fn put(&mut self, key: &str, value: &[u8], lease: i64, opts: DiscoverOptions) -> Result<(), String> {
        let body = serde_json::json!({ "key": B64.encode(key), "value": B64.encode(value), "lease": lease.to_string() }).to_string();
        self.post("/v3/kv/put", body.into_bytes(), opts).await.map(drop)
    }

    /// Refreshes `lease` once.
    pub async fn keep_alive(&mut self, lease: i64, opts: DiscoverOptions) -> Result<(), String> {
        let body = serde_json::json!({ "ID": lease.to_string() }).to_string();
        self.post("/v3/lease/keepalive", body.into_bytes(), opts).await.map(drop)
    }

    /// Revokes `lease`: its keys go at once.
    pub async fn revoke(&mut self, lease: i64, opts: DiscoverOptions) -> Result<(), String> {
        let body = serde_json::json!({ "ID": lease.to_string() }).to_string();
        self.post("/v3/lease/revoke", body.into_bytes(), opts).await.map(drop)
    }

    /// POSTs to the endpoint that answered last, then to the others in turn; authenticates
    /// first when credentials are set and no token is held, and again once when refused.
    async fn post(&mut self, path: &str, body: Vec<u8>, opts: DiscoverOptions) -> Result<Vec<u8>, String> {
        let mut errors = Vec::new();
        for attempt in 0..self.endpoints.len() {
            let i = (self.current + attempt) % self.endpoints.len();
            let endpoint = self.endpoints[i].clone();
            match self.post_to(&endpoint, path, body.clone(), opts).await {
                Ok(answer) => {
                    self.current = i;
                    return Ok(answer);
                }
                Err(e) if e.contains(&endpoint) => errors.push(e),
                Err(e) => errors.push(format!("{endpoint}: {e}")),
            }
        }
        Err(errors.join("; "))
    }

    async fn post_to(&mut self, endpoint: &str, path: &str, body: Vec<u8>, opts: DiscoverOptions) -> Result<Vec<u8>, String> {
        for retry in [false, true] {
            if self.token.is_none()
                && let Some((user, password)) = &self.credentials
            {
                let auth = serde_json::json!({ "name": user, "password": password }).to_string();
                let answer = Request::post_json(endpoint, "/v3/auth/authenticate", auth.into_bytes())
                    .send(opts.timeout, opts.max_bytes)
                    .await
                    .map_err(|e| format!("authenticating as {user:?} ({USERNAME_ENV}) failed: {e}"))?;
                let auth: AuthResponse =
                    serde_json::from_slice(&answer).map_err(|e| format!("etcd's authenticate answer has no token: {e}"))?;
                self.token = Some(auth.token);
            }
            let mut request = Request::post_json(endpoint, path, body.clone());
            if let Some(token) = &self.token {
                request = request.header("Authorization", token.clone());
            }
            match request.send(opts.timeout, opts.max_bytes).await {
                Ok(answer) => return Ok(answer),
                Err(HttpError::Status { body, .. }) if !retry && self.credentials.is_some() && body.contains("token") => {
                    self.token = None;
                }
                Err(e @ HttpError::Status { .. }) if self.credentials.is_none() && e.to_string().contains("user name") => {
                    return Err(format!("{e}: this etcd has authentication on; set {USERNAME_ENV} and {PASSWORD_ENV} as for Dynamo"));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("etcd refused a fresh token".to_owned())
    }
}

/// The end of the range of keys that start with `prefix` (etcd's `range_end`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_steps_up() {
        assert_eq!(prefix_end("v1/mdc/"), b"v1/mdc0");
        assert_eq!(prefix_end("a"), b"b");
    }
}
