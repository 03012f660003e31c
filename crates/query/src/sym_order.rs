//! Grouping by symbol without a shuffle (kdb+'s `select … by sym, …`).
//!
//! DataFusion aggregates in two phases: each partition hashes its rows
//! into partial groups, the partial groups are hashed again across
//! partitions, and a final phase merges them. Grouped by symbol and a time
//! bucket, a day of ticks has about as many groups as half its rows, so
//! both phases build a table of millions of groups and the shuffle moves
//! them all.
//!
//! The rdb already knows where each symbol's rows are (each sealed chunk's
//! `SymIndex`). When the grouping includes the table's symbol column
//! itself, `SymbolAggregateRule` replaces the two phases by one: the scan
//! hands each partition whole symbols (every row of a symbol in one
//! partition, symbols in name order, a symbol's rows in arrival order), so
//! each partition's groups are final, and the single aggregation per
//! partition sees one symbol at a time (the scan declares its order by
//! symbol), keeping a small table of groups instead of millions.
//!
//! Grouped by the symbol and one 64-bit key (a time bucket, a timestamp),
//! the single aggregation is `sym_group::SymGroupExec`, which finds a
//! row's group among its symbol's groups only; DataFusion's aggregate
//! over ordered input interns two-column keys a row at a time, about half
//! the time of such a query.
//!
//! The plan it rewrites, from the top: a final aggregate over a hash
//! shuffle over a partial aggregate over projections and filters over a
//! tickdb table scan (`TickScanExec`). Anything else is left as planned.
//! The rule runs after DataFusion's own physical rules, and the rewritten
//! aggregate declares no partitioning it does not have (`Unknown`), so a
//! parent that needs rows hashed still shuffles them.

use crate::sym_group::SymGroupExec;
use crate::sym_scan::TickScanExec;
use datafusion::arrow::array::{ArrayRef, AsArray, DictionaryArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema, UInt32Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, Result};
use datafusion::logical_expr::sort_properties::ExprProperties;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, Partitioning, ReplaceChildrenOptions,
};
use std::fmt;
use std::sync::Arc;

/// See the module's documentation.
#[derive(Debug, Default)]
pub struct SymbolAggregateRule;

/// A scan, the index of its symbol column at the top of the chain, and the
/// chain of projections and filters above it (top first).
type ScanBelow<'a> = (&'a TickScanExec, usize, Vec<Arc<dyn ExecutionPlan>>);

/// The scan under a partial aggregate, through projections and filters
/// that keep the symbol column a plain column; and the index the symbol
/// column has at the aggregate's input.
fn scan_below(plan: &Arc<dyn ExecutionPlan>) -> Option<ScanBelow<'_>> {
    // The chain from the aggregate's input down to (not including) the scan.
    let mut chain: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    let mut at = plan;
    let scan = loop {
        if let Some(s) = at.downcast_ref::<TickScanExec>() {
            break s;
        }
        let ok = at.downcast_ref::<ProjectionExec>().is_some()
            || at
                .downcast_ref::<FilterExec>()
                .is_some_and(|f| f.projection().is_none());
        if !ok {
            return None;
        }
        chain.push(at.clone());
        at = at.children().into_iter().next()?;
    };
    // Follow the symbol column up through the projections.
    let mut sym = scan.sym_output()?;
    for node in chain.iter().rev() {
        if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            sym = p.expr().iter().position(|e| {
                e.expr
                    .downcast_ref::<Column>()
                    .is_some_and(|c| c.index() == sym)
            })?;
        }
    }
    Some((scan, sym, chain))
}

impl SymbolAggregateRule {
    fn rewrite(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        batch_rows: usize,
    ) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        let Some(fin) = plan.downcast_ref::<AggregateExec>() else {
            return Ok(Transformed::no(plan));
        };
        if *fin.mode() != AggregateMode::FinalPartitioned || fin.limit_options().is_some() {
            return Ok(Transformed::no(plan));
        }
        let Some(shuffle) = fin.input().downcast_ref::<RepartitionExec>() else {
            return Ok(Transformed::no(plan));
        };
        if !matches!(shuffle.partitioning(), Partitioning::Hash(..)) {
            return Ok(Transformed::no(plan));
        }
        let Some(partial) = shuffle.input().downcast_ref::<AggregateExec>() else {
            return Ok(Transformed::no(plan));
        };
        if *partial.mode() != AggregateMode::Partial
            || partial.limit_options().is_some()
            || !partial.group_expr().is_single()
        {
            return Ok(Transformed::no(plan));
        }
        let Some((scan, sym, chain)) = scan_below(partial.input()) else {
            return Ok(Transformed::no(plan));
        };
        // The grouping must hold the symbol column itself, so that no group
        // spans two partitions.
        let groups_by_sym = partial
            .group_expr()
            .expr()
            .iter()
            .any(|(e, _)| e.downcast_ref::<Column>().is_some_and(|c| c.index() == sym));
        if !groups_by_sym {
            return Ok(Transformed::no(plan));
        }
        let Some((mut input, names)) = scan.by_symbol()? else {
            return Ok(Transformed::no(plan));
        };
        for node in chain.iter().rev() {
            input = node.clone().replace_children(
                vec![input],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )?;
        }
        // Grouped by the symbol's key, not its dictionary: DataFusion's
        // vectorized group values take primitives (a dictionary goes
        // through the row format, several times slower), and the keys sort
        // as the names do, so the aggregate still sees its input in order.
        let mut group_exprs = Vec::new();
        let mut sym_out = None;
        for (i, (e, name)) in partial.group_expr().expr().iter().enumerate() {
            if sym_out.is_none() && e.downcast_ref::<Column>().is_some_and(|c| c.index() == sym) {
                sym_out = Some(i);
                group_exprs.push((Arc::new(SortedKeys::new(e.clone())) as PExpr, name.clone()));
            } else {
                group_exprs.push((e.clone(), name.clone()));
            }
        }
        let Some(sym_out) = sym_out else {
            return Ok(Transformed::no(plan));
        };
        let single = AggregateExec::try_new(
            AggregateMode::SinglePartitioned,
            PhysicalGroupBy::new_single(group_exprs),
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            input.clone(),
            input.schema(),
        )?;
        // Grouped by the symbol and a time bucket (or another 64-bit key):
        // a symbol at a time (`sym_group`), not through DataFusion's
        // row-by-row interning of ordered input.
        let single: Arc<dyn ExecutionPlan> =
            match SymGroupExec::replacing(&single, sym_out, batch_rows)? {
                Some(g) => Arc::new(g),
                None => Arc::new(single),
            };
        // The keys back to the symbol column, over the sorted dictionary.
        let out_schema = single.schema();
        let exprs: Vec<ProjectionExpr> = out_schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let col: PExpr = Arc::new(Column::new(f.name(), i));
                let expr = if i == sym_out {
                    Arc::new(KeysToSymbols::new(col, names.clone())) as PExpr
                } else {
                    col
                };
                ProjectionExpr::new(expr, f.name().to_string())
            })
            .collect();
        let single: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(exprs, single)?);
        // The same columns as the final aggregate's, or no rewrite.
        let (a, b) = (single.schema(), fin.schema());
        let same = a.fields().len() == b.fields().len()
            && a.fields()
                .iter()
                .zip(b.fields())
                .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type());
        if !same {
            return Ok(Transformed::no(plan));
        }
        Ok(Transformed::yes(single))
    }
}

impl PhysicalOptimizerRule for SymbolAggregateRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch_rows = usize::from(config.execution.batch_size);
        plan.transform_up(|p| self.rewrite(p, batch_rows))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tickdb_symbol_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

type PExpr = Arc<dyn PhysicalExpr>;

/// The keys of a symbol column built by `sym_partitions`, whose dictionary
/// is sorted: keys order as the names do, so the expression keeps its
/// input's order (`get_properties`). Only the rule puts it in a plan, and
/// only over such a scan.
#[derive(Debug)]
struct SortedKeys {
    sym: PExpr,
}

impl PartialEq for SortedKeys {
    fn eq(&self, other: &Self) -> bool {
        self.sym.eq(&other.sym)
    }
}

impl Eq for SortedKeys {}

impl std::hash::Hash for SortedKeys {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sym.hash(state);
    }
}

impl SortedKeys {
    fn new(sym: PExpr) -> SortedKeys {
        SortedKeys { sym }
    }
}

impl fmt::Display for SortedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sorted_keys({})", self.sym)
    }
}

impl PhysicalExpr for SortedKeys {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::UInt32)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.sym.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let a = self.sym.evaluate(batch)?.into_array(batch.num_rows())?;
        let Some(d) = a.as_dictionary_opt::<UInt32Type>() else {
            return exec_err!(
                "sorted_keys: {} is not a Dictionary(UInt32, _)",
                a.data_type()
            );
        };
        Ok(ColumnarValue::Array(Arc::new(d.keys().clone())))
    }

    fn children(&self) -> Vec<&PExpr> {
        vec![&self.sym]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<PExpr>) -> Result<PExpr> {
        match <[PExpr; 1]>::try_from(children) {
            Ok([sym]) => Ok(Arc::new(SortedKeys::new(sym))),
            Err(_) => exec_err!("sorted_keys takes one argument"),
        }
    }

    fn get_properties(&self, children: &[ExprProperties]) -> Result<ExprProperties> {
        let order = children
            .first()
            .map(|c| c.sort_properties)
            .unwrap_or_default();
        Ok(ExprProperties::new_unknown().with_order(order))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Keys of the sorted dictionary back to the symbol column.
#[derive(Debug)]
struct KeysToSymbols {
    keys: PExpr,
    names: ArrayRef,
}

impl KeysToSymbols {
    fn new(keys: PExpr, names: ArrayRef) -> KeysToSymbols {
        KeysToSymbols { keys, names }
    }
}

impl PartialEq for KeysToSymbols {
    fn eq(&self, other: &Self) -> bool {
        self.keys.eq(&other.keys) && Arc::ptr_eq(&self.names, &other.names)
    }
}

impl Eq for KeysToSymbols {}

impl std::hash::Hash for KeysToSymbols {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.keys.hash(state);
        self.names.len().hash(state);
    }
}

impl fmt::Display for KeysToSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "symbols({})", self.keys)
    }
}

impl PhysicalExpr for KeysToSymbols {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Dictionary(
            Box::new(DataType::UInt32),
            Box::new(self.names.data_type().clone()),
        ))
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.keys.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let a = self.keys.evaluate(batch)?.into_array(batch.num_rows())?;
        let Some(keys) = a.as_primitive_opt::<UInt32Type>() else {
            return exec_err!("symbols: keys are {}, not UInt32", a.data_type());
        };
        let d = DictionaryArray::<UInt32Type>::try_new(keys.clone(), self.names.clone())?;
        Ok(ColumnarValue::Array(Arc::new(d)))
    }

    fn children(&self) -> Vec<&PExpr> {
        vec![&self.keys]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<PExpr>) -> Result<PExpr> {
        match <[PExpr; 1]>::try_from(children) {
            Ok([keys]) => Ok(Arc::new(KeysToSymbols::new(keys, self.names.clone()))),
            Err(_) => exec_err!("symbols takes one argument"),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
