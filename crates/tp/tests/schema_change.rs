//! Schema changes at run time on the tp: `CREATE TABLE` and `ALTER TABLE
//! ... ADD COLUMN` are checked before anything is written, recorded in the
//! journal's schema history and journaled as a marker at the next seq, in
//! order with the updates; a restart under the schema the tp was first
//! given runs under the journal's grown schema; a bad change writes nothing.

use std::path::Path;
use std::sync::Arc;
use tickdb_core::batch::Value;
use tickdb_core::schema_change::{NewColumn, SchemaOp};
use tickdb_core::{Batch, BatchBuilder, ColumnType, Schema};
use tickdb_journal::{FsyncPolicy, JournalReader, SchemaHistory};
use tickdb_tp::schema_binding::RecordDecoder;
use tickdb_tp::{Tickerplant, TpConfig, TpError};

fn config(dir: &Path) -> TpConfig {
    let schema = Schema::default_schema();
    TpConfig {
        fsync: FsyncPolicy::Always,
        ..TpConfig::new(
            dir.join("journal"),
            Arc::new(schema),
            tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string(),
        )
    }
}

fn open(dir: &Path) -> Arc<Tickerplant> {
    Tickerplant::open(config(dir)).expect("open").0
}

/// One trade under `schema`; `venue` fills the fifth column when the
/// schema has one.
fn trade(schema: &Schema, id: i64, venue: Option<&str>) -> Vec<Batch> {
    let def = schema.table("trade").expect("trade");
    let mut b = BatchBuilder::new(def);
    b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + id));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::F64(1.5));
    b.set(3, Value::I64(id));
    if let (Some(v), true) = (venue, def.columns.len() > 4) {
        b.set(4, Value::Symbol(v));
    }
    b.end_row();
    vec![b.finish()]
}

fn add_venue() -> Vec<SchemaOp> {
    vec![SchemaOp::AddColumn {
        table: "trade".into(),
        column: NewColumn {
            name: "venue".into(),
            ty: ColumnType::Symbol,
        },
        if_not_exists: false,
    }]
}

/// Every record of the journal decoded under the history's schema in force
/// at its seq: (seq, batches).
fn decoded(dir: &Path, last: u64) -> Vec<(u64, Vec<Batch>)> {
    let h = SchemaHistory::read(&tickdb_journal::FsStorage, &dir.join("journal"))
        .unwrap()
        .unwrap();
    let dec = RecordDecoder::new(&h).unwrap();
    JournalReader::open(&dir.join("journal"), 1, last)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.seq, dec.decode(r.seq, r.kind, &r.payload).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn add_column_is_journaled_in_order_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tp = open(dir.path());
    let old = tp.schema();
    assert_eq!(tp.write(trade(&old, 1, None)).await.unwrap(), 1);
    assert_eq!(tp.write(trade(&old, 2, None)).await.unwrap(), 2);
    let seq = tp
        .change_schema(add_venue(), "ALTER TABLE trade ADD COLUMN venue symbol")
        .await
        .unwrap();
    assert_eq!(seq, Some(3));
    let new = tp.schema();
    assert_eq!(new.table("trade").unwrap().columns[4].name, "venue");
    assert!(tp.schema_toml().contains("venue"));
    // A write checked under the old schema, journaled after the change: it
    // gets a null venue (what a writer holding the old schema sends).
    assert_eq!(tp.write(trade(&old, 4, None)).await.unwrap(), 4);
    assert_eq!(tp.write(trade(&new, 5, Some("XNYS"))).await.unwrap(), 5);
    // The same change again is refused, naming it; IF NOT EXISTS is a no-op.
    let e = tp.change_schema(add_venue(), "again").await.unwrap_err();
    assert!(
        matches!(&e, TpError::BadInput(m) if m == "table 'trade' already has a column 'venue'"),
        "{e}"
    );
    let mut quiet = add_venue();
    if let SchemaOp::AddColumn { if_not_exists, .. } = &mut quiet[0] {
        *if_not_exists = true;
    }
    assert_eq!(tp.change_schema(quiet, "quiet").await.unwrap(), None);
    assert_eq!(tp.seq(), 5, "a refused change journals nothing");
    tp.shutdown();

    // Records before the marker decode under the old layout, after it
    // under the new one; the marker holds the new schema.
    let recs = decoded(dir.path(), 5);
    assert_eq!(recs[0].1[0].columns.len(), 4);
    let (toml, what) = recs[2].1[0].schema_change_text().unwrap();
    assert!(toml.contains("venue") && what.contains("venue"), "{what}");
    assert_eq!(recs[3].1[0].columns.len(), 5);
    assert!(!recs[3].1[0].columns[4].is_valid(0), "widened to a null");
    assert_eq!(recs[4].1[0].columns[4].data.symbol(0), Some("XNYS"));

    // Restarted with the schema it was first given, the tp runs under the
    // journal's: the column is there.
    let tp = open(dir.path());
    assert!(tp
        .schema()
        .table("trade")
        .unwrap()
        .column_index("venue")
        .is_some());
    assert_eq!(
        tp.write(trade(&tp.schema(), 6, Some("XLON")))
            .await
            .unwrap(),
        6
    );
    tp.shutdown();
}

#[tokio::test]
async fn create_table_then_write_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let tp = open(dir.path());
    let ops = vec![SchemaOp::CreateTable {
        table: "news".into(),
        columns: vec![
            NewColumn {
                name: "time".into(),
                ty: ColumnType::Timestamp,
            },
            NewColumn {
                name: "sym".into(),
                ty: ColumnType::Symbol,
            },
            NewColumn {
                name: "headline".into(),
                ty: ColumnType::Str,
            },
        ],
        timestamp: None,
        if_not_exists: false,
    }];
    assert_eq!(
        tp.change_schema(ops.clone(), "CREATE TABLE news")
            .await
            .unwrap(),
        Some(1)
    );
    let e = tp
        .change_schema(ops, "again")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(e, "table 'news' already exists");
    let schema = tp.schema();
    let mut b = BatchBuilder::new(schema.table("news").unwrap());
    b.set(0, Value::Timestamp(1));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::Str("up"));
    b.end_row();
    assert_eq!(tp.write(vec![b.finish()]).await.unwrap(), 2);
    // ILP sees the table at once.
    let batches = tickdb_tp::ingest::parse_request(
        &tp.schema(),
        b"news,sym=B headline=\"down\" 2\n",
        tickdb_ilp::Precision::Nanos,
        1 << 16,
    )
    .unwrap();
    assert_eq!(tp.write(batches).await.unwrap(), 3);
    tp.shutdown();
    let recs = decoded(dir.path(), 3);
    assert_eq!(recs[2].1[0].table, "news");
}

#[tokio::test]
async fn ilp_auto_create_makes_tables_and_columns_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let tp = open(dir.path());
    // Off by default: nothing changes.
    assert!(!tp.auto_create(b"weather,city=X temp=1.5\n").await.unwrap());
    tp.shutdown();
    let mut cfg = config(dir.path());
    cfg.ilp_auto_create = true;
    let tp = Tickerplant::open(cfg).unwrap().0;
    assert!(tp
        .auto_create(
            b"weather,city=X temp=1.5,n=3i 1000\ntrade,sym=A price=1.0,size=1i,venue=\"Q\"\n"
        )
        .await
        .unwrap());
    let s = tp.schema();
    let w = s.table("weather").unwrap();
    assert_eq!(w.columns[w.time_column].name, "timestamp");
    assert_eq!(s.table("trade").unwrap().columns[4].ty, ColumnType::Str);
    // Nothing missing now.
    assert!(!tp.auto_create(b"weather,city=Y temp=2.5\n").await.unwrap());
    let batches = tickdb_tp::ingest::parse_request(
        &tp.schema(),
        b"weather,city=Y temp=2.5,n=4i 2000\n",
        tickdb_ilp::Precision::Nanos,
        1 << 16,
    )
    .unwrap();
    assert_eq!(batches[0].rows, 1);
    tp.shutdown();
}
