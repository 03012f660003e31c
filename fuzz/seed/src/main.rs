//! Writes the seed corpora, fuzz/corpus/<target>/, from the crates' own
//! encoders: a few small valid inputs per target (and the first byte that
//! selects a target's mode, where it has one). Run from anywhere:
//!   cargo run --manifest-path fuzz/Cargo.toml -p tickdb-fuzz-seed
//! Files are named seed-*; inputs that once crashed a decoder are kept
//! beside them as regress-* and are not touched here.

#[path = "../../src/lib.rs"]
#[allow(dead_code)]
mod common;

use bytes::Bytes;
use std::path::{Path, PathBuf};
use tickdb_core::batch::Value;
use tickdb_core::{codec, Batch, BatchBuilder};
use tickdb_hotrestart::format::{self as hr, ChunkKind, RecordKind};
use tickdb_ipc::{encode::encode_ordered, Atom, Kind, MsgType, Vector, K};
use tickdb_journal::format::{encode_record_in, SegmentHeader};
use tickdb_journal::{EpochHistory, EpochStart, SchemaEntry, SchemaHistory};
use tickdb_net::proto::{self as sub, TpRole};
use tickdb_replication::protocol::{self as repl, Mode};

fn corpus_dir(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target);
    std::fs::create_dir_all(&d).expect("corpus directory");
    d
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    std::fs::write(corpus_dir(target).join(format!("seed-{name}")), bytes).expect("seed file");
}

fn with_sel(sel: u8, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(rest);
    v
}

/// A few rows of two tables of the fuzz schema, every column type.
fn batches() -> Vec<Batch> {
    let s = common::schema();
    let mut t = BatchBuilder::new(s.table("trade").unwrap());
    for i in 0..3 {
        t.set(0, Value::Timestamp(1_700_000_000_000_000_000 + i));
        t.set(1, Value::Symbol(if i % 2 == 0 { "AAPL" } else { "MSFT" }));
        t.set(2, Value::F64(100.0 + i as f64 / 4.0));
        if i != 1 {
            t.set(3, Value::I64(100 * i));
        }
        t.end_row();
    }
    let mut a = BatchBuilder::new(s.table("all").unwrap());
    a.set(0, Value::Timestamp(1));
    a.set(1, Value::Symbol("X"));
    a.set(2, Value::F64(-0.5));
    a.set(3, Value::I64(-7));
    a.set(4, Value::I32(42));
    a.set(5, Value::Bool(true));
    a.set(6, Value::Str("héllo"));
    a.set(7, Value::Bytes(&[0, 1, 255]));
    a.set(8, Value::Timestamp(2));
    a.end_row();
    vec![t.finish(), a.finish()]
}

fn payload() -> Vec<u8> {
    codec::encode_to_vec(&batches())
}

fn ilp() {
    let t = "ilp_lines";
    write(t, "trade", &with_sel(0, b"trade,sym=AAPL price=1.5,size=100i 1700000000000000000\ntrade,sym=MSFT price=2e3,size=7u 1700000000000000001\n"));
    write(t, "all-types", &with_sel(0x81, b"all,sym=A\\ B f=1.5,l=-3i,i=7i,b=t,s=\"a \\\"q\\\" \nline\",raw=\"\\\\x\",other_ts=5t 1700000000000000\n"));
    write(t, "keyed-and-symbols", &with_sel(0x42, b"cache,k1=a,k2=1i v=0.25\r\nref,sym=IBM,exch=N note=\"n\" 1700000000000\n# comment\n\n"));
    write(t, "errors", &with_sel(0xc3, b"trade,sym=A price=1i\nnope x=1\ntrade price=NaN,size=1i,size=2i 1\ntrade,sym=A price==1\n"));
    write(t, "timestamps", &with_sel(0x10, b"trade,sym=A price=1,size=1i 1700000000000000000n\ntrade,sym=B price=Infinity,size=9223372036854775807i -9214560000000000000\ntrade,sym=C price=-inf,size=1i,time=5n\n"));
}

fn sub_frames() {
    let t = "sub_frames";
    let msgs = [
        sub::Message::Subscribe {
            from_seq: 1,
            tables: vec!["trade".into()],
            symbols: vec!["AAPL".into(), "MSFT".into()],
            epoch: Some(3),
        },
        sub::Message::Subscribe {
            from_seq: 0,
            tables: vec![],
            symbols: vec![],
            epoch: None,
        },
        sub::Message::SubscribeOk {
            current_seq: 9,
            schema_toml: "[[table]]\nname = \"t\"\n".into(),
            role: Some(TpRole {
                epoch: 2,
                role: sub::ROLE_PRIMARY,
                primary: "h:1".into(),
            }),
        },
        sub::Message::SubscribeOk {
            current_seq: 9,
            schema_toml: String::new(),
            role: None,
        },
        sub::Message::Epoch {
            epoch: 2,
            first_seq: 5,
        },
        sub::Message::Update {
            seq: 10,
            payload: Bytes::from(payload()),
        },
        sub::Message::Error {
            message: "subscription refused".into(),
        },
        sub::Message::Heartbeat { current_seq: 10 },
        sub::Message::Write {
            request_id: 1,
            payload: payload(),
        },
        sub::Message::WriteAck {
            request_id: 1,
            seq: 11,
            error: None,
        },
        sub::Message::WriteAck {
            request_id: 2,
            seq: 0,
            error: Some("bad".into()),
        },
    ];
    let mut stream = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let mut one = Vec::new();
        sub::encode_message(m, &mut one);
        write(t, &format!("{i:02}-{}", m.name()), &one);
        if !matches!(m, sub::Message::Update { .. } | sub::Message::Write { .. }) {
            stream.extend_from_slice(&one);
        }
    }
    write(t, "stream", &stream);
}

fn update_payloads() {
    let t = "update_payloads";
    write(t, "two-tables", &payload());
    write(
        t,
        "markers",
        &codec::encode_to_vec(&[Batch::clear_marker("trade"), Batch::end_of_day(20_000)]),
    );
    write(t, "trade", &codec::encode_to_vec(&batches()[..1]));
}

fn journal_records() {
    let t = "journal_records";
    let p = payload();
    let mut recs = Vec::new();
    encode_record_in(&mut recs, 0, 1, 1, 3, 1_700_000_000_000_000_000, &p);
    encode_record_in(&mut recs, 0, 2, 1, 0, 1_700_000_000_000_000_001, b"");
    encode_record_in(&mut recs, 1, 3, 2, 1, 1_700_000_000_000_000_002, &p[..40]);
    let header = SegmentHeader {
        first_seq: 1,
        created_unix_ns: 1_700_000_000_000_000_000,
    }
    .encode();
    let mut seg = header.to_vec();
    seg.extend_from_slice(&recs);
    write(t, "segment", &with_sel(0, &seg));
    write(t, "segment-pit", &with_sel(4, &seg));
    write(t, "records", &with_sel(1, &recs));
    write(t, "records-fixed-crc", &with_sel(2, &recs));
    let mut torn = recs.clone();
    torn.truncate(recs.len() - 5);
    write(t, "records-torn", &with_sel(5, &torn));
    let mut later = SegmentHeader {
        first_seq: 7,
        created_unix_ns: 0,
    }
    .encode()
    .to_vec();
    encode_record_in(&mut later, 2, 7, 1, 0, 0, b"x");
    write(t, "segment-seq7", &with_sel(0, &later));
    let schema = SchemaHistory::new(vec![
        SchemaEntry {
            first_seq: 1,
            recorded_unix_ns: 1,
            text: common::SCHEMA_TOML
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join("\n"),
        },
        SchemaEntry {
            first_seq: 5,
            recorded_unix_ns: 2,
            text: "# empty\n".into(),
        },
    ])
    .expect("schema history");
    write(t, "schema-history", &with_sel(3, &schema.encode()));
    let epochs = EpochHistory::new(vec![
        EpochStart {
            epoch: 0,
            first_seq: 1,
        },
        EpochStart {
            epoch: 2,
            first_seq: 9,
        },
    ])
    .expect("epochs");
    write(t, "epochs", &with_sel(3, epochs.encode().as_bytes()));
}

fn hotrestart_chunks() {
    let t = "hotrestart_chunks";
    let mut v = hr::encode_header(ChunkKind::Value, 0, 5).to_vec();
    hr::encode_record(&mut v, 1, RecordKind::Value, b"key-1", b"value one");
    hr::encode_record(&mut v, 2, RecordKind::Value, b"k2", b"");
    write(t, "value-chunk", &v);
    let mut tomb = hr::encode_header(ChunkKind::Tombstone, hr::HEADER_FLAG_GC_OUTPUT, 6).to_vec();
    hr::encode_record(&mut tomb, 3, RecordKind::Tombstone, b"key-1", b"");
    hr::encode_record(&mut tomb, 4, RecordKind::PrefixTombstone, b"k", b"");
    write(t, "tombstone-chunk", &tomb);
    let mut bare = Vec::new();
    hr::encode_record(&mut bare, 9, RecordKind::Value, b"a", b"b");
    write(t, "record", &bare);
}

fn q_objects() -> Vec<K> {
    vec![
        K::Atom(Atom::Long(Kind::Long, 42)),
        K::Atom(Atom::Symbol("trade".into())),
        K::List(vec![
            K::string(".u.upd"),
            K::symbol("trade"),
            K::List(vec![
                K::vector(Vector::Long(Kind::Timestamp, vec![1, 2])),
                K::symbols(&["AAPL", "MSFT"]),
                K::vector(Vector::Float(Kind::Float, vec![1.5, f64::NAN])),
                K::vector(Vector::Int(Kind::Date, vec![8000, i32::MIN])),
            ]),
        ]),
        K::table(
            vec!["sym".into(), "px".into(), "ok".into()],
            vec![
                K::symbols(&["a", "b"]),
                K::vector(Vector::Real(vec![1.0, 2.0])),
                K::vector(Vector::Bool(vec![true, false])),
            ],
        ),
        K::dict(
            K::symbols(&["k"]),
            K::List(vec![K::Atom(Atom::Guid([7; 16]))]),
        ),
        K::Null,
        K::Error("type".into()),
    ]
}

fn ipc_frames() {
    let t = "ipc_frames";
    write(t, "handshake", &with_sel(0, b"alice:secret\x03"));
    write(t, "handshake-old", &with_sel(0, b"bob"));
    let mut stream = Vec::new();
    for (i, k) in q_objects().iter().enumerate() {
        let msg = tickdb_ipc::encode_message(MsgType::Sync, k, false).expect("encodes");
        write(t, &format!("message-{i}"), &with_sel(1, &msg));
        stream.extend_from_slice(&msg);
        let mut body = Vec::new();
        encode_ordered(k, i % 2 == 1, &mut body);
        write(
            t,
            &format!("object-{i}"),
            &with_sel(if i % 2 == 1 { 7 } else { 3 }, &body),
        );
    }
    write(t, "messages", &with_sel(1, &stream));
    // A large message that compresses.
    let big = K::vector(Vector::Long(Kind::Long, (0..400).map(|i| i % 5).collect()));
    let z = tickdb_ipc::encode_message(MsgType::Async, &big, true).expect("encodes");
    assert_eq!(z[2], 1, "the large message compresses");
    write(t, "compressed-message", &with_sel(1, &z));
    write(t, "compressed", &with_sel(2, &z));
}

fn replication_frames() {
    let t = "replication_frames";
    let epochs = EpochHistory::new(vec![
        EpochStart {
            epoch: 0,
            first_seq: 1,
        },
        EpochStart {
            epoch: 1,
            first_seq: 3,
        },
    ])
    .unwrap();
    let mut recs = Vec::new();
    encode_record_in(&mut recs, 0, 1, 1, 3, 5, &payload());
    encode_record_in(&mut recs, 1, 2, 1, 0, 6, b"");
    let schema = SchemaHistory::new(vec![SchemaEntry {
        first_seq: 1,
        recorded_unix_ns: 1,
        text: "# s\n".into(),
    }])
    .unwrap();
    let msgs = [
        repl::Message::Challenge {
            version: repl::PROTOCOL_VERSION,
            nonce: [1; 32],
            name: "p:1".into(),
        },
        repl::Message::Hello {
            version: repl::PROTOCOL_VERSION,
            nonce: [2; 32],
            proof: [3; 32],
            from_seq: 1,
            last_seq: 0,
            last_crc: 0,
            flags: repl::FLAG_CAN_RESEED,
            name: "s:1".into(),
            http: "s:2".into(),
            epochs: epochs.clone(),
        },
        repl::Message::Hello {
            version: 1,
            nonce: [0; 32],
            proof: [0; 32],
            from_seq: 0,
            last_seq: 0,
            last_crc: 0,
            flags: 0,
            name: String::new(),
            http: String::new(),
            epochs: EpochHistory::default(),
        },
        repl::Message::Welcome {
            proof: [4; 32],
            primary_seq: 9,
            first_seq_held: 1,
            mode: Mode::SemiSync,
            interval_ms: 0,
            epochs,
            role: repl::ROLE_PRIMARY,
            http: "p:2".into(),
            ilp: "p:3".into(),
        },
        repl::Message::Diverged {
            proof: [5; 32],
            keep_through: 2,
            primary_epoch: 1,
            reason: "diverged".into(),
        },
        repl::Message::Refuse {
            reason: "no".into(),
        },
        repl::Message::SchemaHistory {
            bytes: schema.encode(),
        },
        repl::Message::SegmentStart {
            first_seq: 1,
            created_ns: 7,
        },
        repl::Message::Records { bytes: recs },
        repl::Message::Heartbeat {
            primary_seq: 2,
            primary_time_ns: 8,
        },
        repl::Message::Ack {
            received_seq: 2,
            durable_seq: 2,
            applied_seq: 1,
        },
        repl::Message::Reseed {
            seq: 5,
            journal_from: 4,
            tables: 2,
            rows: 10,
        },
        repl::Message::Snapshot { payload: payload() },
        repl::Message::SnapshotEnd { seq: 5 },
    ];
    let mut stream = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let f = m.encode().expect("encodes");
        write(t, &format!("{i:02}-{}", m.name()), &with_sel(0, &f));
        if i < 5 {
            stream.extend_from_slice(&f);
        }
    }
    write(t, "handshake-stream", &with_sel(1, &stream));
}

/// Chunk images of the `all` table (every column type, nulls, strings)
/// and of `trade`, each behind the selector byte that picks its table.
fn chunk_images() {
    use std::sync::Arc;
    use tickdb_core::domain::Domains;
    use tickdb_core::store::{image, Store};
    let t = "chunk_images";
    let schema = common::schema();
    for (sel, table, rows) in [(0u8, "all", 9usize), (0x10, "all", 70), (1, "trade", 5)] {
        let store = Store::new(Arc::new(schema.clone()), Domains::new(None).unwrap()).unwrap();
        let def = schema.table(table).unwrap();
        let mut b = BatchBuilder::new(def);
        for r in 0..rows {
            let names = ["A", "BB", "", "MSFT"];
            for (c, col) in def.columns.iter().enumerate() {
                if r % 4 == 3 && c > 0 {
                    continue; // a null
                }
                let s = "x".repeat(r % 5);
                let v = match col.ty {
                    tickdb_core::ColumnType::Timestamp => Value::Timestamp(1_000 + r as i64),
                    tickdb_core::ColumnType::Symbol => Value::Symbol(names[r % 4]),
                    tickdb_core::ColumnType::F64 => Value::F64(r as f64 / 2.0),
                    tickdb_core::ColumnType::I64 => Value::I64(r as i64 - 3),
                    tickdb_core::ColumnType::I32 => Value::I32(r as i32),
                    tickdb_core::ColumnType::Bool => Value::Bool(r % 2 == 0),
                    tickdb_core::ColumnType::Str => Value::Str(&s),
                    tickdb_core::ColumnType::Bytes => Value::Bytes(s.as_bytes()),
                };
                b.set(c, v);
            }
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
        let chunk = store.raw_snapshot(table).unwrap().chunks.remove(0);
        let mut out = Vec::new();
        image::encode(def, &chunk, &mut out).unwrap();
        write(t, &format!("{table}-{rows}-rows"), &with_sel(sel, &out));
    }
}

fn main() {
    chunk_images();
    ilp();
    sub_frames();
    update_payloads();
    journal_records();
    hotrestart_chunks();
    ipc_frames();
    replication_frames();
    for t in [
        "ilp_lines",
        "sub_frames",
        "update_payloads",
        "journal_records",
        "hotrestart_chunks",
        "ipc_frames",
        "replication_frames",
        "chunk_images",
    ] {
        let d = corpus_dir(t);
        let (n, bytes) = std::fs::read_dir(&d).unwrap().fold((0, 0), |(n, b), e| {
            (n + 1, b + e.unwrap().metadata().unwrap().len())
        });
        println!("{t}: {n} files, {bytes} bytes in {}", d.display());
    }
}
