//! The KV, lease and txn calls, and which endpoint each one goes to.

use crate::endpoint;
use crate::error::{Error, Result, GRPC_NOT_FOUND};
use crate::gateway::{self, b64};
use crate::http;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A key and its value with etcd's bookkeeping. `create_revision` is 0 only
/// for a key that does not exist, which is what [`Compare::absent`] tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// Puts since the key was created (1 after the first).
    pub version: i64,
    /// The lease the key is attached to; 0 for none.
    pub lease: i64,
}

/// The keys a range read returned and the store revision it read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub kvs: Vec<Kv>,
    /// The header revision: the store's revision when the read was served.
    pub revision: i64,
}

/// A txn guard; all must hold for the success branch. Only equality, the
/// comparison leader election needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// `create_revision(key) == revision`; 0 means the key is absent.
    CreateRevision { key: String, revision: i64 },
    /// `mod_revision(key) == revision`: nobody wrote the key since we read it.
    ModRevision { key: String, revision: i64 },
    /// `value(key) == value`.
    Value { key: String, value: Vec<u8> },
    /// `version(key) == version`.
    Version { key: String, version: i64 },
}

impl Compare {
    pub fn create_revision(key: impl Into<String>, revision: i64) -> Compare {
        Compare::CreateRevision {
            key: key.into(),
            revision,
        }
    }

    /// The key does not exist.
    pub fn absent(key: impl Into<String>) -> Compare {
        Compare::create_revision(key, 0)
    }

    pub fn mod_revision(key: impl Into<String>, revision: i64) -> Compare {
        Compare::ModRevision {
            key: key.into(),
            revision,
        }
    }

    pub fn value(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Compare {
        Compare::Value {
            key: key.into(),
            value: value.into(),
        }
    }

    pub fn version(key: impl Into<String>, version: i64) -> Compare {
        Compare::Version {
            key: key.into(),
            version,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Compare::CreateRevision { key, revision } => json!({
                "result": "EQUAL", "target": "CREATE", "key": b64(key.as_bytes()),
                "create_revision": revision.to_string(),
            }),
            Compare::ModRevision { key, revision } => json!({
                "result": "EQUAL", "target": "MOD", "key": b64(key.as_bytes()),
                "mod_revision": revision.to_string(),
            }),
            Compare::Value { key, value } => json!({
                "result": "EQUAL", "target": "VALUE", "key": b64(key.as_bytes()),
                "value": b64(value),
            }),
            Compare::Version { key, version } => json!({
                "result": "EQUAL", "target": "VERSION", "key": b64(key.as_bytes()),
                "version": version.to_string(),
            }),
        }
    }
}

/// One operation of a txn branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        lease: Option<i64>,
    },
    Get {
        key: String,
    },
    Delete {
        key: String,
    },
}

impl Op {
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>, lease: Option<i64>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }

    pub fn get(key: impl Into<String>) -> Op {
        Op::Get { key: key.into() }
    }

    pub fn delete(key: impl Into<String>) -> Op {
        Op::Delete { key: key.into() }
    }

    fn to_json(&self) -> Value {
        match self {
            Op::Put { key, value, lease } => json!({ "request_put": put_body(key, value, *lease) }),
            Op::Get { key } => json!({ "request_range": { "key": b64(key.as_bytes()) } }),
            Op::Delete { key } => {
                json!({ "request_delete_range": { "key": b64(key.as_bytes()) } })
            }
        }
    }
}

/// What one op of the branch that ran returned, in op order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResponse {
    Put,
    Get { kvs: Vec<Kv> },
    Delete { deleted: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether every compare held, i.e. whether the success branch ran.
    pub succeeded: bool,
    /// The store revision after the txn (unchanged if it wrote nothing).
    pub revision: i64,
    pub responses: Vec<OpResponse>,
}

impl TxnResult {
    /// Every key the branch's `Op::Get`s returned, in op order: after a
    /// failed "create if absent", the current holder.
    pub fn kvs(&self) -> impl Iterator<Item = &Kv> {
        self.responses.iter().flat_map(|r| match r {
            OpResponse::Get { kvs } => kvs.as_slice(),
            _ => &[],
        })
    }
}

/// An etcd v3 client over the JSON gateway. Cheap to clone; clones share the
/// endpoint they last reached.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoints: Vec<String>,
    request_timeout: Duration,
    /// Index of the endpoint that last answered; calls start there so a dead
    /// first member costs one timeout, not one per call.
    preferred: AtomicUsize,
}

impl Client {
    /// `endpoints` as `host:port` or `http://host:port`. `request_timeout`
    /// bounds one attempt at one endpoint (connect, send, whole response);
    /// a call that tries every endpoint may take that many times as long.
    pub fn new(endpoints: Vec<String>, request_timeout: Duration) -> Result<Client> {
        if endpoints.is_empty() {
            return Err(Error::Config {
                reason: "no etcd endpoints given".to_string(),
            });
        }
        if request_timeout.is_zero() {
            return Err(Error::Config {
                reason: "request timeout must be above zero".to_string(),
            });
        }
        let endpoints = endpoints
            .iter()
            .map(|e| endpoint::normalize(e))
            .collect::<Result<Vec<_>>>()?;
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                request_timeout,
                preferred: AtomicUsize::new(0),
            }),
        })
    }

    /// `"http://a:2379,b:2379"` into the list [`Client::new`] takes.
    pub fn parse_endpoints(list: &str) -> Result<Vec<String>> {
        endpoint::parse_list(list)
    }

    /// The endpoints, normalized to `host:port`, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The endpoint the next call tries first: the one that last answered.
    pub fn preferred_endpoint(&self) -> &str {
        let i = self.inner.preferred.load(Ordering::Relaxed) % self.inner.endpoints.len();
        &self.inner.endpoints[i]
    }

    /// Grants a lease of `ttl_s` seconds; returns its id. etcd raises a TTL
    /// below its minimum (about 2 s with default election settings).
    pub async fn grant(&self, ttl_s: i64) -> Result<i64> {
        const PATH: &str = "/v3/lease/grant";
        let (endpoint, r): (_, gateway::LeaseGrantResponse) = self
            .call(PATH, &json!({ "TTL": ttl_s.to_string() }))
            .await?;
        if !r.error.is_empty() {
            return Err(Error::Server {
                endpoint,
                path: PATH,
                status: 200,
                code: None,
                message: r.error,
            });
        }
        if r.id == 0 {
            return Err(decode_error(endpoint, PATH, "lease grant returned no ID"));
        }
        Ok(r.id)
    }

    /// Renews `lease` once; returns the TTL it now has, in seconds. 0 or
    /// less means the lease is gone (expired or revoked) and every key under
    /// it with it.
    pub async fn keepalive_once(&self, lease: i64) -> Result<i64> {
        const PATH: &str = "/v3/lease/keepalive";
        // A bidirectional stream through the gateway: our body is one
        // request, after which the server sees end-of-stream and ends its
        // reply, a stream of {"result":...} / {"error":...} lines.
        let (endpoint, body) = self
            .call_raw(PATH, &json!({ "ID": lease.to_string() }))
            .await?;
        let mut items = serde_json::Deserializer::from_slice(&body)
            .into_iter::<gateway::StreamItem<gateway::LeaseKeepAliveResponse>>();
        let item = match items.next() {
            Some(Ok(item)) => item,
            Some(Err(e)) => return Err(decode_error(endpoint, PATH, e.to_string())),
            None => {
                return Err(decode_error(
                    endpoint,
                    PATH,
                    "keepalive stream ended without a message",
                ))
            }
        };
        if let Some(e) = item.error {
            return Err(Error::Server {
                endpoint,
                path: PATH,
                status: u16::try_from(e.http_code).unwrap_or(200),
                code: Some(e.grpc_code),
                message: e.message,
            });
        }
        let Some(r) = item.result else {
            return Err(decode_error(
                endpoint,
                PATH,
                "keepalive message has neither result nor error",
            ));
        };
        if r.id != lease {
            return Err(decode_error(
                endpoint,
                PATH,
                format!("keepalive for lease {lease} answered for lease {}", r.id),
            ));
        }
        Ok(r.ttl)
    }

    /// Revokes `lease`, deleting its keys now rather than at expiry. Returns
    /// false if the lease was already gone.
    pub async fn revoke(&self, lease: i64) -> Result<bool> {
        match self
            .call::<serde::de::IgnoredAny>("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::Server {
                code: Some(GRPC_NOT_FOUND),
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The seconds `lease` has left; -1 if it does not exist.
    pub async fn lease_ttl(&self, lease: i64) -> Result<i64> {
        let (_, r): (_, gateway::LeaseTimeToLiveResponse) = self
            .call("/v3/lease/timetolive", &json!({ "ID": lease.to_string() }))
            .await?;
        Ok(r.ttl)
    }

    pub async fn get(&self, key: &str) -> Result<Option<Kv>> {
        Ok(self.range(key, false).await?.kvs.into_iter().next())
    }

    /// Every key starting with `prefix`, in key order.
    pub async fn get_prefix(&self, prefix: &str) -> Result<Vec<Kv>> {
        Ok(self.range(prefix, true).await?.kvs)
    }

    /// `key`, or every key under it when `prefix`, with the revision read at.
    pub async fn range(&self, key: &str, prefix: bool) -> Result<Range> {
        const PATH: &str = "/v3/kv/range";
        let mut body = json!({ "key": b64(key.as_bytes()) });
        if prefix {
            body["range_end"] = Value::String(b64(&prefix_end(key.as_bytes())));
        }
        let (endpoint, r): (_, gateway::RangeResponse) = self.call(PATH, &body).await?;
        Ok(Range {
            kvs: kvs(&endpoint, PATH, r.kvs)?,
            revision: r.header.revision,
        })
    }

    /// Writes `key`, under `lease` if given; returns the store revision of
    /// the write.
    pub async fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64> {
        let (_, r): (_, gateway::PutResponse) = self
            .call("/v3/kv/put", &put_body(key, value, lease))
            .await?;
        Ok(r.header.revision)
    }

    /// Deletes `key`; returns how many keys went (0 or 1).
    pub async fn delete(&self, key: &str) -> Result<i64> {
        let (_, r): (_, gateway::DeleteRangeResponse) = self
            .call("/v3/kv/deleterange", &json!({ "key": b64(key.as_bytes()) }))
            .await?;
        Ok(r.deleted)
    }

    /// If every compare holds run `success`, else `failure`, atomically.
    ///
    /// Like every call, a txn that times out at one endpoint is sent to the
    /// next, and the first may have applied it: a "create if absent" can
    /// then fail with our own value as the holder, which callers should
    /// treat as success.
    pub async fn txn(
        &self,
        compares: Vec<Compare>,
        success: Vec<Op>,
        failure: Vec<Op>,
    ) -> Result<TxnResult> {
        const PATH: &str = "/v3/kv/txn";
        let body = json!({
            "compare": compares.iter().map(Compare::to_json).collect::<Vec<_>>(),
            "success": success.iter().map(Op::to_json).collect::<Vec<_>>(),
            "failure": failure.iter().map(Op::to_json).collect::<Vec<_>>(),
        });
        let (endpoint, r): (_, gateway::TxnResponse) = self.call(PATH, &body).await?;
        let mut responses = Vec::with_capacity(r.responses.len());
        for op in r.responses {
            responses.push(match op {
                gateway::ResponseOp {
                    response_range: Some(range),
                    ..
                } => OpResponse::Get {
                    kvs: kvs(&endpoint, PATH, range.kvs)?,
                },
                gateway::ResponseOp {
                    response_delete_range: Some(d),
                    ..
                } => OpResponse::Delete { deleted: d.deleted },
                gateway::ResponseOp {
                    response_put: Some(_),
                    ..
                } => OpResponse::Put,
                _ => {
                    return Err(decode_error(
                        endpoint,
                        PATH,
                        "txn response op of an unknown kind",
                    ))
                }
            });
        }
        Ok(TxnResult {
            succeeded: r.succeeded,
            revision: r.header.revision,
            responses,
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        path: &'static str,
        body: &Value,
    ) -> Result<(String, T)> {
        let (endpoint, bytes) = self.call_raw(path, body).await?;
        match serde_json::from_slice(&bytes) {
            Ok(t) => Ok((endpoint, t)),
            Err(e) => Err(decode_error(endpoint, path, e.to_string())),
        }
    }

    /// Sends to each endpoint in turn from the preferred one until one
    /// answers; returns that endpoint and the 2xx body. An answer that is an
    /// error about the request itself ends the call: every member would
    /// give the same.
    async fn call_raw(&self, path: &'static str, body: &Value) -> Result<(String, Vec<u8>)> {
        let body = body.to_string().into_bytes();
        let n = self.inner.endpoints.len();
        let start = self.inner.preferred.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for i in 0..n {
            let index = (start + i) % n;
            let endpoint = &self.inner.endpoints[index];
            let outcome = match http::post(endpoint, path, &body, self.inner.request_timeout).await
            {
                Ok(response) => check_status(endpoint, path, response),
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.is_endpoint_failure() => failures.push(e),
                outcome => {
                    self.inner.preferred.store(index, Ordering::Relaxed);
                    return outcome.map(|b| (endpoint.clone(), b));
                }
            }
        }
        Err(Error::Unreachable { errors: failures })
    }
}

fn check_status(endpoint: &str, path: &'static str, response: http::Response) -> Result<Vec<u8>> {
    if (200..300).contains(&response.status) {
        return Ok(response.body);
    }
    let (code, message) = match serde_json::from_slice::<gateway::ErrorBody>(&response.body) {
        Ok(e) if !e.message.is_empty() || !e.error.is_empty() => {
            let message = if e.message.is_empty() {
                e.error
            } else {
                e.message
            };
            (e.code, message)
        }
        // Not the gateway's error shape (a proxy's page, say): show a bit.
        _ => {
            const SHOWN_BYTES_MAX: usize = 200;
            let shown = &response.body[..response.body.len().min(SHOWN_BYTES_MAX)];
            (None, String::from_utf8_lossy(shown).trim().to_string())
        }
    };
    Err(Error::Server {
        endpoint: endpoint.to_string(),
        path,
        status: response.status,
        code,
        message,
    })
}

fn decode_error(endpoint: String, path: &'static str, reason: impl Into<String>) -> Error {
    Error::Decode {
        endpoint,
        path,
        reason: reason.into(),
    }
}

fn put_body(key: &str, value: &[u8], lease: Option<i64>) -> Value {
    let mut body = json!({ "key": b64(key.as_bytes()), "value": b64(value) });
    if let Some(lease) = lease {
        body["lease"] = Value::String(lease.to_string());
    }
    body
}

fn kvs(endpoint: &str, path: &'static str, raw: Vec<gateway::KeyValue>) -> Result<Vec<Kv>> {
    raw.into_iter()
        .map(|kv| {
            let key = String::from_utf8(kv.key).map_err(|e| {
                decode_error(
                    endpoint.to_string(),
                    path,
                    format!(
                        "key {:?} is not UTF-8",
                        String::from_utf8_lossy(e.as_bytes())
                    ),
                )
            })?;
            Ok(Kv {
                key,
                value: kv.value,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                version: kv.version,
                lease: kv.lease,
            })
        })
        .collect()
}

/// The range end that selects every key starting with `prefix`: the prefix
/// with its last byte below 0xff incremented (clientv3's GetPrefixRangeEnd).
/// An empty or all-0xff prefix selects every key from it on, `"\0"`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            if let Some(b) = end.last_mut() {
                *b = last + 1;
            }
            return end;
        }
        end.pop();
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/tickdb/"), b"/tickdb0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn txn_json_matches_the_gateway() {
        assert_eq!(
            Compare::absent("k").to_json(),
            json!({"result":"EQUAL","target":"CREATE","key":"aw==","create_revision":"0"})
        );
        assert_eq!(
            Op::put("k", "v", Some(7)).to_json(),
            json!({"request_put":{"key":"aw==","value":"dg==","lease":"7"}})
        );
    }

    #[test]
    fn error_replies_keep_the_grpc_code() {
        let r = http::Response {
            status: 404,
            body: br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#.to_vec(),
        };
        let e = check_status("h:1", "/v3/kv/put", r).err();
        assert!(e.as_ref().is_some_and(Error::is_lease_not_found), "{e:?}");
        let unavailable = http::Response {
            status: 503,
            body:
                br#"{"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14}"#
                    .to_vec(),
        };
        let e = check_status("h:1", "/v3/kv/put", unavailable).err();
        assert!(e.as_ref().is_some_and(Error::is_endpoint_failure), "{e:?}");
        let html = http::Response {
            status: 502,
            body: b"<html>bad gateway</html>".to_vec(),
        };
        let msg = check_status("h:1", "/v3/kv/put", html)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            msg.as_deref(),
            Some("etcd h:1: POST /v3/kv/put: HTTP 502: <html>bad gateway</html>")
        );
    }

    #[test]
    fn client_config_is_checked() {
        assert!(matches!(
            Client::new(vec![], Duration::from_secs(1)),
            Err(Error::Config { .. })
        ));
        assert!(matches!(
            Client::new(vec!["a:1".into()], Duration::ZERO),
            Err(Error::Config { .. })
        ));
        let c = Client::new(
            vec!["http://a:1".into(), "b".into()],
            Duration::from_secs(1),
        );
        assert_eq!(
            c.as_ref().map(|c| c.endpoints().to_vec()).ok(),
            Some(vec!["a:1".to_string(), "b:2379".to_string()])
        );
    }
}
