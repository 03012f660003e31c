//! The gateway's JSON: etcd's protobuf messages through grpc-gateway's
//! jsonpb (proto field names, defaults omitted, `bytes` as base64, int64 as
//! decimal strings). Only the fields this client reads are declared; every
//! one defaults, because a zero value is simply absent (an expired lease's
//! keepalive has no `TTL`, a failed txn no `succeeded`).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::de::{self, Deserializer};
use serde::Deserialize;

pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The gateway writes int64 as a string, but accepts and may write plain
/// numbers too; both are read.
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Num(i64),
        Str(String),
    }
    match Int::deserialize(d)? {
        Int::Num(n) => Ok(n),
        Int::Str(s) => s
            .parse()
            .map_err(|_| de::Error::custom(format!("expected an int64, got {s:?}"))),
    }
}

fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    B64.decode(s.as_bytes())
        .map_err(|e| de::Error::custom(format!("bad base64 ({e})")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Header {
    #[serde(deserialize_with = "int64")]
    pub revision: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct KeyValue {
    #[serde(deserialize_with = "bytes")]
    pub key: Vec<u8>,
    #[serde(deserialize_with = "bytes")]
    pub value: Vec<u8>,
    #[serde(deserialize_with = "int64")]
    pub create_revision: i64,
    #[serde(deserialize_with = "int64")]
    pub mod_revision: i64,
    #[serde(deserialize_with = "int64")]
    pub version: i64,
    #[serde(deserialize_with = "int64")]
    pub lease: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RangeResponse {
    pub header: Header,
    pub kvs: Vec<KeyValue>,
    #[serde(deserialize_with = "int64")]
    pub count: i64,
    pub more: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PutResponse {
    pub header: Header,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct DeleteRangeResponse {
    pub header: Header,
    #[serde(deserialize_with = "int64")]
    pub deleted: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TxnResponse {
    pub header: Header,
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}

/// A oneof: exactly one member is present. A nested txn's response is not
/// modelled (this client never sends one).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResponseOp {
    pub response_range: Option<RangeResponse>,
    pub response_put: Option<PutResponse>,
    pub response_delete_range: Option<DeleteRangeResponse>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LeaseGrantResponse {
    pub header: Header,
    #[serde(rename = "ID", deserialize_with = "int64")]
    pub id: i64,
    #[serde(rename = "TTL", deserialize_with = "int64")]
    pub ttl: i64,
    /// The proto carries an error string beside the gRPC status.
    pub error: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LeaseKeepAliveResponse {
    pub header: Header,
    #[serde(rename = "ID", deserialize_with = "int64")]
    pub id: i64,
    #[serde(rename = "TTL", deserialize_with = "int64")]
    pub ttl: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LeaseTimeToLiveResponse {
    pub header: Header,
    #[serde(rename = "TTL", deserialize_with = "int64")]
    pub ttl: i64,
}

/// One message of a streamed (server-streaming) gateway response:
/// `{"result": ...}` or `{"error": ...}`, newline-delimited.
#[derive(Debug, Deserialize)]
pub(crate) struct StreamItem<T> {
    pub result: Option<T>,
    pub error: Option<StreamError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StreamError {
    pub grpc_code: i64,
    pub http_code: i64,
    pub message: String,
}

/// The body of a non-2xx unary reply.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorBody {
    pub error: String,
    pub message: String,
    pub code: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_response_as_etcd_3_4_writes_it() {
        let body = br#"{"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}"#;
        let r: RangeResponse = serde_json::from_slice(body).expect("decodes");
        assert_eq!(r.header.revision, 2);
        assert_eq!(r.count, 1);
        assert_eq!(r.kvs.len(), 1);
        assert_eq!(r.kvs[0].key, b"foo");
        assert_eq!(r.kvs[0].value, b"bar");
        assert_eq!(r.kvs[0].lease, 0);
    }

    #[test]
    fn absent_fields_are_zero() {
        let r: TxnResponse =
            serde_json::from_slice(br#"{"header":{"revision":"4"}}"#).expect("decodes");
        assert!(!r.succeeded);
        assert!(r.responses.is_empty());
        let item: StreamItem<LeaseKeepAliveResponse> = serde_json::from_slice(
            br#"{"result":{"header":{"revision":"3"},"ID":"4111120204449869069"}}"#,
        )
        .expect("decodes");
        let ka = item.result.expect("result");
        assert_eq!(ka.id, 4111120204449869069);
        assert_eq!(ka.ttl, 0);
    }

    #[test]
    fn numbers_and_bad_values() {
        let h: Header = serde_json::from_slice(br#"{"revision":7}"#).expect("decodes");
        assert_eq!(h.revision, 7);
        assert!(serde_json::from_slice::<Header>(br#"{"revision":"7x"}"#).is_err());
        assert!(serde_json::from_slice::<KeyValue>(br#"{"key":"!!"}"#).is_err());
    }
}
