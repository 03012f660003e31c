//! A journal is bound to the schema its records were written under: the tp
//! records it (the journal's `SCHEMA` file), opens a journal only under an
//! equal or compatible schema, records a compatible change with the sequence
//! number it applies from, and refuses an incompatible one, naming the
//! difference and writing nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tickdb_core::batch::Value;
use tickdb_core::{Batch, BatchBuilder, Schema};
use tickdb_journal::{FsyncPolicy, RecoveryMode, SchemaHistory};
use tickdb_tp::schema_binding::RecordDecoder;
use tickdb_tp::{OpenError, Tickerplant, TpConfig};

const BASE: &str = r#"
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "price", type = "f64" },
  { name = "size", type = "i64" },
]
"#;

fn config(dir: &Path, text: &str, origin: &str) -> TpConfig {
    TpConfig {
        schema_origin: origin.to_string(),
        fsync: FsyncPolicy::Always,
        recovery: RecoveryMode::Strict,
        segment_bytes_max: 1 << 20,
        line_bytes_max: 1 << 16,
        request_bytes_max: 1 << 26,
        sub_queue_bytes_max: 1 << 26,
        ..TpConfig::new(
            dir.join("journal"),
            Arc::new(Schema::parse(text, origin).expect("test schema parses")),
            text.to_string(),
        )
    }
}

fn trade(schema: &Schema, id: i64) -> Vec<Batch> {
    let mut b = BatchBuilder::new(schema.table("trade").expect("trade"));
    b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + id));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::F64(1.5));
    b.set(3, Value::I64(id));
    b.end_row();
    vec![b.finish()]
}

fn open(dir: &Path, text: &str, origin: &str) -> Result<Arc<Tickerplant>, OpenError> {
    Tickerplant::open(config(dir, text, origin)).map(|(tp, _)| tp)
}

/// Starts under `text`, writes `n` trades, stops.
fn write_trades(dir: &Path, text: &str, n: i64) {
    let tp = open(dir, text, "a.toml").expect("open");
    let schema = tp.schema().clone();
    for i in 0..n {
        tp.write_blocking(trade(&schema, i)).expect("write");
    }
    tp.shutdown();
}

/// Every file of the journal directory and its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("LOCK"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

fn history(dir: &Path) -> SchemaHistory {
    SchemaHistory::read(&tickdb_journal::FsStorage, &dir.join("journal"))
        .unwrap()
        .expect("a schema history")
}

#[test]
fn a_new_journal_records_its_schema_at_seq_1_and_reopens_under_it() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 3);
    let h = history(tmp.path());
    assert_eq!(h.entries().len(), 1);
    assert_eq!(h.current().first_seq, 1);
    assert_eq!(h.current().text, BASE);
    // Comments and formatting do not matter: the same schema reopens, and
    // nothing is recorded again.
    let reformatted = format!("# the same, commented\n{}", BASE.replace(" = ", "="));
    let before = snapshot(tmp.path());
    let tp = open(tmp.path(), &reformatted, "b.toml").expect("same schema opens");
    tp.shutdown();
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn an_incompatible_schema_is_refused_naming_the_difference_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 3);
    let before = snapshot(tmp.path());
    let cases = [
        (
            BASE.replace(
                "{ name = \"size\", type = \"i64\" }",
                "{ name = \"size\", type = \"f64\" }",
            ),
            "table 'trade' column 'size': type i64 -> f64",
        ),
        // Same types in the same places: the codec would decode the old
        // records without complaint, into the wrong column name.
        (
            BASE.replace("\"price\"", "\"px\""),
            "table 'trade' column 'price' (f64) removed",
        ),
        (
            BASE.replace(
                "{ name = \"size\", type = \"i64\" },",
                "{ name = \"size\", type = \"i64\" }, { name = \"venue\", type = \"symbol\" },",
            ),
            "table 'trade' column 'venue' (symbol) added at position 5",
        ),
    ];
    for (text, want) in cases {
        let e = open(tmp.path(), &text, "other.toml")
            .err()
            .expect("refused");
        assert!(matches!(e, OpenError::SchemaMismatch(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(want), "{want:?} not in: {msg}");
        assert!(msg.contains("other.toml"), "names the schema file: {msg}");
        assert!(msg.contains("SCHEMA"), "names the history file: {msg}");
        assert!(msg.contains("Nothing was written"), "{msg}");
        assert_eq!(snapshot(tmp.path()), before, "{want}: the journal changed");
    }
    // The original schema still opens and the journal goes on.
    let tp = open(tmp.path(), BASE, "a.toml").expect("original schema opens");
    assert_eq!(tp.write_blocking(trade(&tp.schema(), 9)).unwrap(), 4);
    tp.shutdown();
}

#[test]
fn a_compatible_change_is_recorded_from_the_next_seq() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 3);
    let more = format!(
        "{BASE}\n[[table]]\nname = \"news\"\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}, {{ name = \"text\", type = \"string\" }}]\n"
    );
    let tp = open(tmp.path(), &more, "more.toml").expect("compatible schema opens");
    let mut b = BatchBuilder::new(tp.schema().table("news").unwrap());
    b.set(0, Value::Timestamp(5));
    b.set(1, Value::Str("hello"));
    b.end_row();
    assert_eq!(tp.write_blocking(vec![b.finish()]).unwrap(), 4);
    tp.shutdown();
    let h = history(tmp.path());
    let seqs: Vec<u64> = h.entries().iter().map(|e| e.first_seq).collect();
    assert_eq!(seqs, vec![1, 4]);
    assert_eq!(h.current().text, more);
    // Every record decodes under the schema in force at its seq.
    let dec = RecordDecoder::new(&h).unwrap();
    let rep = tickdb_journal::verify_payloads(&tmp.path().join("journal"), &mut |s, k, p| {
        dec.check(s, k, p)
    })
    .unwrap();
    assert!(rep.is_clean(), "{:?}", rep.problems);
    assert_eq!(rep.payloads_checked, 4);
    // Started again with the schema without `news`, the tp runs under the
    // journal's (which has it): record 4 is not orphaned, and nothing is
    // recorded (run-time schema changes restart the same way).
    let tp = open(tmp.path(), BASE, "a.toml").expect("runs under the journal's schema");
    assert!(tp.schema().table("news").is_some());
    tp.shutdown();
    assert_eq!(history(tmp.path()), h);
}

#[test]
fn a_schema_no_record_was_written_under_can_be_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 0);
    let other = BASE.replace("\"size\", type = \"i64\"", "\"size\", type = \"f64\"");
    let tp = open(tmp.path(), &other, "other.toml").expect("no record depends on the old schema");
    tp.shutdown();
    let h = history(tmp.path());
    assert_eq!(h.entries().len(), 1);
    assert_eq!(
        (h.current().first_seq, h.current().text.as_str()),
        (1, other.as_str())
    );
}

fn fixture(tmp: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pre-schema-history");
    let dst = tmp.join("journal");
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// The fixture is a journal written by tickdb before it recorded schemas
/// (the built-in schema; three updates of a trade and a quote, then a clear
/// of `quote`): no SCHEMA file.
#[test]
fn an_old_journal_without_history_is_checked_then_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    assert!(!SchemaHistory::path(&dir).exists());
    // Under a schema its records do not decode under: refused, naming the
    // first record that fails, and nothing is written.
    let before = snapshot(tmp.path());
    let e = open(tmp.path(), BASE, "a.toml").err().expect("refused");
    let msg = e.to_string();
    assert!(matches!(e, OpenError::SchemaMismatch(_)), "{msg}");
    assert!(msg.contains("seq 1"), "{msg}");
    assert!(msg.contains("journal-00000000000000000001.log"), "{msg}");
    assert!(msg.contains("no schema history"), "{msg}");
    assert_eq!(snapshot(tmp.path()), before);
    // Under the schema it was written under: opens, and the schema is
    // recorded from the first seq the journal holds.
    let builtin = tickdb_core::schema::DEFAULT_SCHEMA_TOML;
    let tp = open(tmp.path(), builtin, "<built-in>").expect("opens");
    assert_eq!(tp.seq(), 4);
    tp.shutdown();
    let h = history(tmp.path());
    assert_eq!(h.entries().len(), 1);
    assert_eq!(
        (h.current().first_seq, h.current().text.as_str()),
        (1, builtin)
    );
}

#[test]
fn a_damaged_history_is_refused_never_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 2);
    let path = SchemaHistory::path(&tmp.path().join("journal"));
    let mut b = std::fs::read(&path).unwrap();
    let n = b.len();
    b[n - 3] ^= 0x01;
    std::fs::write(&path, &b).unwrap();
    let e = open(tmp.path(), BASE, "a.toml").err().expect("refused");
    let msg = e.to_string();
    assert!(matches!(e, OpenError::Corrupt(_)), "{msg}");
    assert!(msg.contains("SCHEMA"), "{msg}");
    assert!(msg.contains("CRC32C"), "{msg}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b,
        "the damaged file was touched"
    );
}

#[test]
fn the_decoder_uses_the_schema_in_force_at_each_seq() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 2);
    let h = history(tmp.path());
    let dec = RecordDecoder::new(&h).unwrap();
    let payload = tickdb_core::codec::encode_to_vec(&trade(dec.schema_at(1).unwrap(), 1));
    assert!(dec
        .check(1, tickdb_tp::RECORD_KIND_UPDATE, &payload)
        .is_ok());
    assert!(dec
        .check(0, tickdb_tp::RECORD_KIND_UPDATE, &payload)
        .is_err());
    let e = dec.check(2, 99, &payload).unwrap_err();
    assert!(e.contains("kind 99"), "{e}");
    let mut bad = payload.clone();
    bad.truncate(bad.len() - 1);
    assert!(dec.check(2, tickdb_tp::RECORD_KIND_UPDATE, &bad).is_err());
}

/// Repair (or point-in-time recovery) can cut the records a later schema
/// entry was recorded for; the next records must not be claimed for the
/// schema before it.
#[test]
fn entries_past_a_cut_journal_are_moved_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    write_trades(tmp.path(), BASE, 3);
    let more = format!(
        "{BASE}\n[[table]]\nname = \"news\"\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}]\n"
    );
    let tp = open(tmp.path(), &more, "more.toml").unwrap();
    for i in 0..2 {
        tp.write_blocking(trade(&tp.schema(), i)).unwrap();
    }
    tp.shutdown();
    assert_eq!(
        history(tmp.path())
            .entries()
            .iter()
            .map(|e| e.first_seq)
            .collect::<Vec<_>>(),
        vec![1, 4]
    );
    // Cut the journal after record 2, at a record boundary.
    let jdir = tmp.path().join("journal");
    let seg = jdir.join("journal-00000000000000000001.log");
    let end_of_2: u64 = 32
        + tickdb_journal::JournalReader::open(&jdir, 1, 2)
            .unwrap()
            .map(|r| 32 + r.unwrap().payload.len() as u64)
            .sum::<u64>();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(end_of_2)
        .unwrap();
    let tp = open(tmp.path(), &more, "more.toml").unwrap();
    assert_eq!(tp.seq(), 2);
    tp.shutdown();
    let h = history(tmp.path());
    let seqs: Vec<u64> = h.entries().iter().map(|e| e.first_seq).collect();
    assert_eq!(seqs, vec![1, 3], "the news schema now applies from seq 3");
    // And back to the old schema: nothing was written under the newer one.
    let tp = open(tmp.path(), BASE, "a.toml").unwrap();
    tp.shutdown();
    assert_eq!(history(tmp.path()).entries().len(), 1);
}

/// The checked-in journal with a damaged schema history beside it (the
/// journal crate's fixture `schema-v1-bitflip`): refused, naming the file
/// and the entry, and the file is left as it was.
#[test]
fn a_checked_in_damaged_history_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let damaged = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../journal/tests/fixtures/schema-v1-bitflip/SCHEMA");
    std::fs::copy(&damaged, SchemaHistory::path(&dir)).unwrap();
    let before = snapshot(tmp.path());
    let builtin = tickdb_core::schema::DEFAULT_SCHEMA_TOML;
    let e = open(tmp.path(), builtin, "<built-in>")
        .err()
        .expect("refused");
    let msg = e.to_string();
    assert!(matches!(e, OpenError::Corrupt(_)), "{msg}");
    assert!(msg.contains("SCHEMA at offset 122"), "{msg}");
    assert!(msg.contains("entry 2 of 2 fails its CRC32C check"), "{msg}");
    assert!(msg.contains("not rebuilt from a guess"), "{msg}");
    assert_eq!(snapshot(tmp.path()), before);
}
