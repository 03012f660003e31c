//! End of day at the tp: the marker is journaled alone, counts as no row,
//! ends its segment (the next day starts a file of its own, so trimming a
//! day removes whole files), and reaches a subscriber whatever tables and
//! symbols it follows.

use std::collections::HashSet;
use std::sync::Arc;
use tickdb_core::batch::Value;
use tickdb_core::{Batch, BatchBuilder, Schema};
use tickdb_tp::hub::SubFilter;
use tickdb_tp::{Tickerplant, TpConfig};

fn trade(schema: &Schema, id: i64) -> Vec<Batch> {
    let mut b = BatchBuilder::new(schema.table("trade").expect("trade table"));
    b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + id));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::F64(1.5));
    b.set(3, Value::I64(id));
    b.end_row();
    vec![b.finish()]
}

#[tokio::test]
async fn the_marker_ends_its_segment_and_counts_no_row() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::default_schema();
    let (tp, _) = Tickerplant::open(TpConfig::new(
        tmp.path().join("journal"),
        Arc::new(schema.clone()),
        tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string(),
    ))
    .unwrap();
    tp.write(trade(&schema, 1)).await.unwrap();
    tp.write(trade(&schema, 2)).await.unwrap();
    assert_eq!(tp.end_of_day(20_777).await.unwrap(), 3);
    assert_eq!(tp.write(trade(&schema, 4)).await.unwrap(), 4);
    assert_eq!(tp.status().rows, 3, "the marker's date is not a tick");
    tp.shutdown();
    // The next day's first record starts a segment.
    let next = tmp.path().join("journal/journal-00000000000000000004.log");
    assert!(next.exists(), "no segment starts at seq 4");
    let marker = tickdb_journal::JournalReader::open(&tmp.path().join("journal"), 3, 3)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let batches = tickdb_core::codec::decode(&marker.payload, Some(&schema)).unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].end_of_day_date(), Some(20_777));
}

#[test]
fn every_filter_passes_the_marker() {
    let schema = Schema::default_schema();
    let update = [trade(&schema, 1), vec![Batch::end_of_day(20_777)]].concat();
    let filters = [
        SubFilter {
            tables: HashSet::from(["quote".to_string()]),
            symbols: HashSet::new(),
        },
        SubFilter {
            tables: HashSet::new(),
            symbols: HashSet::from(["ZZZ".to_string()]),
        },
    ];
    for f in filters {
        let got = f.select(&update);
        assert_eq!(got.len(), 1, "{f:?}");
        assert_eq!(got[0].end_of_day_date(), Some(20_777), "{f:?}");
    }
}
