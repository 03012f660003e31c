//! `latest('quote')`: the last row of each symbol (kdb+ `select by sym from
//! quote`, QuestDB `LATEST ON ... PARTITION BY sym`), found through the
//! symbol index instead of a scan and sort.
//!
//! Chunks are visited newest first. A sealed chunk's symbol index gives each
//! symbol's last row in it directly; the active chunk (not indexed yet) is
//! scanned backwards. The walk stops as soon as every symbol the table has
//! seen is found, so on a day of ticks it touches the newest chunks only.
//! "Last" is arrival order, which for a tick table is time order.

use crate::provider::TickTable;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::interleave_record_batch;
use datafusion::arrow::datatypes::UInt32Type;
use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, DataFusionError, Result, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::Expr;
use std::collections::HashMap;
use std::sync::Arc;
use tickdb_core::store::TableSnapshot;

/// The name it is called by in SQL.
pub const NAME: &str = "latest";

#[derive(Debug)]
pub struct LatestFunc {
    pub tables: HashMap<String, Arc<TickTable>>,
    /// The append tables that span history (`QueryOptions::hdb`): their
    /// latest rows may come from earlier days.
    pub hist: HashMap<String, Arc<crate::history::HistTable>>,
}

impl TableFunctionImpl for LatestFunc {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let name = match args {
            [Expr::Literal(ScalarValue::Utf8(Some(s)), _)] => s.clone(),
            _ => {
                return plan_err!("{NAME}() takes one table name as a string, e.g. {NAME}('quote')")
            }
        };
        let Some(table) = self.tables.get(&name) else {
            let mut known: Vec<&str> = self.tables.keys().map(|s| s.as_str()).collect();
            known.sort();
            return plan_err!(
                "{NAME}('{name}'): no such table (tables: {})",
                known.join(", ")
            );
        };
        let Some(sym) = table.def().sym_column else {
            return plan_err!("{NAME}('{name}'): the table has no symbol column to group by");
        };
        if let Some(h) = self.hist.get(&name) {
            return Ok(Arc::new(crate::history_latest::HistLatest::new(h.clone())));
        }
        let snap = table.snapshot()?;
        let batch = latest_rows(&snap, sym)?;
        Ok(Arc::new(MemTable::try_new(
            snap.schema.clone(),
            vec![vec![batch]],
        )?))
    }
}

/// One row per symbol: each symbol's last row, in symbol-id order.
pub fn latest_rows(snap: &TableSnapshot, sym_column: usize) -> Result<RecordBatch> {
    let n_syms = snap.symbols.len();
    // Per symbol id: (chunk, row) of its last row, once found.
    let mut found: Vec<Option<(usize, u32)>> = vec![None; n_syms];
    let mut missing = n_syms;
    for (ci, chunk) in snap.chunks.iter().enumerate().rev() {
        if missing == 0 {
            break;
        }
        match &chunk.sym_index {
            Some(ix) => {
                for (id, slot) in found.iter_mut().enumerate() {
                    if slot.is_none() {
                        if let Some(&r) = ix.rows(id as u32).last() {
                            *slot = Some((ci, r));
                            missing -= 1;
                        }
                    }
                }
            }
            None => {
                let col = chunk.batch.column(sym_column);
                let dict = col.as_dictionary_opt::<UInt32Type>().ok_or_else(|| {
                    DataFusionError::Internal(
                        "symbol column is not Dictionary(UInt32, Utf8)".into(),
                    )
                })?;
                let keys = dict.keys();
                for r in (0..keys.len()).rev() {
                    if missing == 0 {
                        break;
                    }
                    if keys.is_null(r) {
                        continue;
                    }
                    let id = keys.value(r) as usize;
                    if let Some(slot @ None) = found.get_mut(id) {
                        *slot = Some((ci, r as u32));
                        missing -= 1;
                    }
                }
            }
        }
    }
    // One gather over the chunks, in symbol-id order.
    let picks: Vec<(usize, usize)> = found
        .into_iter()
        .flatten()
        .map(|(ci, r)| (ci, r as usize))
        .collect();
    if picks.is_empty() {
        return Ok(RecordBatch::new_empty(snap.schema.clone()));
    }
    let batches: Vec<&RecordBatch> = snap.chunks.iter().map(|c| &c.batch).collect();
    Ok(interleave_record_batch(&batches, &picks)?)
}
