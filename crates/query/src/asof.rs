//! ASOF JOIN (kdb+ `aj`): for each left row, the latest right row with an
//! equal key whose time is at or before the left row's time; left rows
//! without a match are kept with nulls.
//!
//! ```sql
//! SELECT t.time, t.sym, t.price, q.bid, q.ask
//! FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym
//! ```
//!
//! DataFusion 55 parses this (sqlparser's Snowflake-style `ASOF JOIN`) but
//! does not plan it, so this module owns the whole path, behind one seam
//! that DataFusion 56's native planning can replace:
//!
//! 1. `rewrite` turns the parsed `ASOF JOIN` into a `LEFT JOIN` whose `ON`
//!    carries a marker call `__tickdb_asof(t.time, q.time, '>=')`, so that
//!    DataFusion's SQL planner resolves names and builds the joined schema.
//! 2. The analyzer rule `AsofRule` (run after type coercion, before any
//!    optimizer rule could move filters across the join) replaces each such
//!    join with an `AsofJoinNode`.
//! 3. `AsofPlanner` plans the node as `AsofJoinExec`: the right side is
//!    read once. Where it is in time order (an rdb table's chunks are),
//!    each left stream walks it with a cursor (`asof_merge`); left rows the
//!    cursor cannot answer (out of time order, or a forward-looking `<=`,
//!    `<`) are found in per-key runs sorted by time (a symbol's rows, in
//!    arrival order among equal times), built on first need. No hash join,
//!    no cross product; left batches stream through in their order.
//!
//! `MATCH_CONDITION` may use `>=` (latest at or before), `>` (strictly
//! before), `<=` (earliest at or after) or `<` (strictly after).

use crate::asof_merge::{Cursor, Merge, MergeBatch, NO_KEY, NO_ROW};
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch,
};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit, UInt32Type};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{
    exec_err, plan_datafusion_err, plan_err, DFSchemaRef, DataFusionError, Result, ScalarValue,
};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::logical_plan::builder::build_join_schema;
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, Extension, JoinType, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, UserDefinedLogicalNode,
    UserDefinedLogicalNodeCore, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    apply_expression_roots, Boundedness, EmissionType,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, ReplaceChildrenOptions,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::{
    self as ast, BinaryOperator, JoinConstraint, JoinOperator, TableFactor, TableWithJoins,
    VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, OnceLock};

/// The marker function the rewrite puts in the `ON` clause.
pub const MARKER: &str = "__tickdb_asof";

// ---------------------------------------------------------------------------
// 1. Statement rewrite
// ---------------------------------------------------------------------------

/// Rewrites every `ASOF JOIN` of a parsed statement into a marked
/// `LEFT JOIN` that `AsofRule` turns into an as-of join. The one entry
/// point between SQL text and the as-of join's planning.
pub fn rewrite(statement: &mut Statement) -> Result<()> {
    match statement {
        Statement::Statement(s) => rewrite_ast(s),
        Statement::Explain(e) => rewrite(&mut e.statement),
        _ => Ok(()),
    }
}

fn rewrite_ast(s: &mut ast::Statement) -> Result<()> {
    struct V(Option<DataFusionError>);
    impl VisitorMut for V {
        type Break = ();
        fn pre_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<()> {
            for twj in &mut select.from {
                if let Err(e) = rewrite_joins(twj) {
                    self.0 = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = V(None);
    let _ = s.visit(&mut v);
    match v.0 {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The name a relation is referred to by: its alias or its table name.
fn relation_name(tf: &TableFactor) -> Option<String> {
    match tf {
        TableFactor::Table { name, alias, .. } => Some(match alias {
            Some(a) => a.name.to_string(),
            None => name.to_string(),
        }),
        TableFactor::Derived { alias: Some(a), .. } => Some(a.name.to_string()),
        _ => None,
    }
}

fn parse_expr(sql: &str) -> Result<ast::Expr> {
    Parser::new(&GenericDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| DataFusionError::SQL(Box::new(e), None))
}

fn unnest(mut e: &ast::Expr) -> &ast::Expr {
    while let ast::Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// `cmp AND a - b <= tol` → (cmp, Some((a, b, strict, tol))); `cmp` alone
/// → (cmp, None).
type Tolerance<'a> = Option<(&'a ast::Expr, &'a ast::Expr, bool, &'a ast::Expr)>;

fn split_tolerance(cond: &ast::Expr) -> Result<(&ast::Expr, Tolerance<'_>)> {
    let ast::Expr::BinaryOp {
        left,
        op: BinaryOperator::And,
        right,
    } = cond
    else {
        return Ok((cond, None));
    };
    let tol = unnest(right);
    if let ast::Expr::BinaryOp {
        left: diff,
        op: op @ (BinaryOperator::LtEq | BinaryOperator::Lt),
        right: limit,
    } = tol
    {
        if let ast::Expr::BinaryOp {
            left: a,
            op: BinaryOperator::Minus,
            right: b,
        } = unnest(diff)
        {
            let strict = matches!(op, BinaryOperator::Lt);
            return Ok((unnest(left), Some((a, b, strict, limit))));
        }
    }
    plan_err!(
        "ASOF JOIN MATCH_CONDITION takes the time comparison and optionally a tolerance, \
         e.g. (t.time >= q.time AND t.time - q.time <= INTERVAL '1 second'); got {cond}"
    )
}

fn rewrite_joins(twj: &mut TableWithJoins) -> Result<()> {
    if let TableFactor::NestedJoin {
        table_with_joins, ..
    } = &mut twj.relation
    {
        rewrite_joins(table_with_joins)?;
    }
    for i in 0..twj.joins.len() {
        if let TableFactor::NestedJoin {
            table_with_joins, ..
        } = &mut twj.joins[i].relation
        {
            rewrite_joins(table_with_joins)?;
        }
        let JoinOperator::AsOf {
            match_condition,
            constraint,
        } = &twj.joins[i].join_operator
        else {
            continue;
        };
        let (cond, tolerance) = split_tolerance(unnest(match_condition))?;
        let marker = match cond {
            ast::Expr::BinaryOp { left, op, right }
                if matches!(
                    op,
                    BinaryOperator::GtEq | BinaryOperator::Gt | BinaryOperator::LtEq | BinaryOperator::Lt
                ) =>
            {
                match tolerance {
                    None => format!("{MARKER}({left}, {right}, '{op}')"),
                    Some((a, b, strict, tol)) => {
                        // The difference must be of the compared times,
                        // the later one first.
                        let later_first = match op {
                            BinaryOperator::GtEq | BinaryOperator::Gt => (left, right),
                            _ => (right, left),
                        };
                        if a.to_string() != later_first.0.to_string()
                            || b.to_string() != later_first.1.to_string()
                        {
                            return plan_err!(
                                "ASOF JOIN tolerance must read `{} - {} <= <interval>`, got `{a} - {b}`",
                                later_first.0,
                                later_first.1
                            );
                        }
                        let op2 = if strict { "<" } else { "<=" };
                        format!("{MARKER}({left}, {right}, '{op}', {tol}, '{op2}')")
                    }
                }
            }
            other => {
                return plan_err!(
                    "ASOF JOIN MATCH_CONDITION must compare the two sides' times with >=, >, <= or <, got {other}"
                )
            }
        };
        let on = match constraint {
            JoinConstraint::On(e) => format!("{marker} AND ({e})"),
            JoinConstraint::Using(cols) => {
                let left = if i == 0 {
                    relation_name(&twj.relation)
                } else {
                    relation_name(&twj.joins[i - 1].relation)
                };
                let right = relation_name(&twj.joins[i].relation);
                let (Some(l), Some(r)) = (left, right) else {
                    return plan_err!(
                        "ASOF JOIN USING needs named relations on both sides; use ON"
                    );
                };
                let mut s = marker;
                for c in cols {
                    s.push_str(&format!(" AND {l}.{c} = {r}.{c}"));
                }
                s
            }
            JoinConstraint::None => marker,
            JoinConstraint::Natural => {
                return plan_err!("NATURAL ASOF JOIN is not supported; use ON")
            }
        };
        twj.joins[i].join_operator = JoinOperator::LeftOuter(JoinConstraint::On(parse_expr(&on)?));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Marker function
// ---------------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq, Hash)]
struct AsofMarker {
    signature: Signature,
}

impl ScalarUDFImpl for AsofMarker {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!("{MARKER} marks an ASOF JOIN condition and cannot be evaluated elsewhere")
    }
}

// ---------------------------------------------------------------------------
// 3. Logical node and the analyzer rule that makes it
// ---------------------------------------------------------------------------

/// `left.time <op> right.time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum AsofOp {
    /// Latest right row at or before the left time.
    Ge,
    /// Latest right row strictly before.
    Gt,
    /// Earliest right row at or after.
    Le,
    /// Earliest right row strictly after.
    Lt,
}

impl AsofOp {
    fn parse(s: &str) -> Option<AsofOp> {
        Some(match s {
            ">=" => AsofOp::Ge,
            ">" => AsofOp::Gt,
            "<=" => AsofOp::Le,
            "<" => AsofOp::Lt,
            _ => return None,
        })
    }

    fn flip(self) -> AsofOp {
        match self {
            AsofOp::Ge => AsofOp::Le,
            AsofOp::Gt => AsofOp::Lt,
            AsofOp::Le => AsofOp::Ge,
            AsofOp::Lt => AsofOp::Gt,
        }
    }

    fn sql(self) -> &'static str {
        match self {
            AsofOp::Ge => ">=",
            AsofOp::Gt => ">",
            AsofOp::Le => "<=",
            AsofOp::Lt => "<",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsofJoinNode {
    left: LogicalPlan,
    right: LogicalPlan,
    left_keys: Vec<Expr>,
    right_keys: Vec<Expr>,
    left_time: Expr,
    right_time: Expr,
    op: AsofOp,
    /// Largest allowed distance between matched times, in nanoseconds
    /// (inclusive); a farther match counts as none.
    tolerance: Option<i64>,
    schema: DFSchemaRef,
}

impl PartialOrd for AsofJoinNode {
    fn partial_cmp(&self, _other: &Self) -> Option<std::cmp::Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for AsofJoinNode {
    fn name(&self) -> &str {
        "AsofJoin"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.left, &self.right]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut v = self.left_keys.clone();
        v.extend(self.right_keys.iter().cloned());
        v.push(self.left_time.clone());
        v.push(self.right_time.clone());
        v
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "AsofJoin: {} {} {}",
            self.left_time,
            self.op.sql(),
            self.right_time
        )?;
        if let Some(t) = self.tolerance {
            write!(f, " within {t} ns")?;
        }
        for (l, r) in self.left_keys.iter().zip(&self.right_keys) {
            write!(f, ", {l} = {r}")?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(
        &self,
        mut exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let n = self.left_keys.len();
        if exprs.len() != 2 * n + 2 || inputs.len() != 2 {
            return plan_err!("AsofJoin: wrong number of expressions or inputs");
        }
        let right = inputs.pop().expect("two inputs");
        let left = inputs.pop().expect("two inputs");
        let right_time = exprs.pop().expect("checked");
        let left_time = exprs.pop().expect("checked");
        let right_keys = exprs.split_off(n);
        let schema = Arc::new(build_join_schema(
            left.schema(),
            right.schema(),
            &JoinType::Left,
        )?);
        Ok(AsofJoinNode {
            left,
            right,
            left_keys: exprs,
            right_keys,
            left_time,
            right_time,
            op: self.op,
            tolerance: self.tolerance,
            schema,
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let nl = self.left.schema().fields().len();
        let mut l = BTreeSet::new();
        let mut r = BTreeSet::new();
        for &i in output_columns {
            if i < nl {
                l.insert(i);
            } else {
                r.insert(i - nl);
            }
        }
        for e in self.left_keys.iter().chain([&self.left_time]) {
            for c in e.column_refs() {
                l.insert(self.left.schema().index_of_column(c).ok()?);
            }
        }
        for e in self.right_keys.iter().chain([&self.right_time]) {
            for c in e.column_refs() {
                r.insert(self.right.schema().index_of_column(c).ok()?);
            }
        }
        Some(vec![l.into_iter().collect(), r.into_iter().collect()])
    }
}

/// Which input an expression reads: Some(true) left only, Some(false)
/// right only, None both or neither.
fn side(e: &Expr, left: &LogicalPlan, right: &LogicalPlan) -> Option<bool> {
    let cols = e.column_refs();
    if cols.is_empty() {
        return None;
    }
    if cols.iter().all(|c| left.schema().has_column(c)) {
        Some(true)
    } else if cols.iter().all(|c| right.schema().has_column(c)) {
        Some(false)
    } else {
        None
    }
}

fn is_marker(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.name() == MARKER)
}

fn has_marker(j: &datafusion::logical_expr::Join) -> bool {
    j.filter.as_ref().is_some_and(|f| {
        let mut found = false;
        let _ = f.apply(|e| {
            found |= is_marker(e);
            Ok(if found {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        });
        found
    })
}

fn to_node(j: datafusion::logical_expr::Join) -> Result<LogicalPlan> {
    let left = Arc::unwrap_or_clone(j.left);
    let right = Arc::unwrap_or_clone(j.right);
    let mut left_keys = Vec::new();
    let mut right_keys = Vec::new();
    for (l, r) in j.on {
        left_keys.push(l);
        right_keys.push(r);
    }
    let mut time: Option<(Expr, Expr, AsofOp, Option<i64>)> = None;
    for c in split_conjunction_owned(
        j.filter
            .unwrap_or(Expr::Literal(ScalarValue::Boolean(Some(true)), None)),
    ) {
        match c {
            Expr::ScalarFunction(ScalarFunction { func, args }) if func.name() == MARKER => {
                let mut args = args;
                let tolerance = match args.len() {
                    3 => None,
                    5 => {
                        let strict = args.pop().expect("5 args");
                        let tol = args.pop().expect("5 args");
                        let strict = matches!(&strict, Expr::Literal(v, _) if v.to_string().trim_matches('\'') == "<");
                        let ns = tolerance_ns(&tol)?;
                        Some(if strict { ns - 1 } else { ns })
                    }
                    _ => return plan_err!("{MARKER} takes 3 or 5 arguments"),
                };
                let [a, b, op] = <[Expr; 3]>::try_from(args)
                    .map_err(|_| plan_datafusion_err!("{MARKER} takes 3 arguments"))?;
                let op = match &op {
                    Expr::Literal(v, _) => v.to_string(),
                    _ => String::new(),
                };
                let op = AsofOp::parse(op.trim_matches('\'')).ok_or_else(|| {
                    plan_datafusion_err!("ASOF JOIN: bad MATCH_CONDITION operator {op}")
                })?;
                let t = match (side(&a, &left, &right), side(&b, &left, &right)) {
                    (Some(true), Some(false)) => (a, b, op, tolerance),
                    (Some(false), Some(true)) => (b, a, op.flip(), tolerance),
                    _ => {
                        return plan_err!(
                            "ASOF JOIN MATCH_CONDITION must compare a time of the left side with one of the right side, got {a} and {b}"
                        )
                    }
                };
                if time.replace(t).is_some() {
                    return plan_err!("ASOF JOIN takes one MATCH_CONDITION");
                }
            }
            Expr::Literal(ScalarValue::Boolean(Some(true)), _) => {}
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op: Operator::Eq,
                right: b,
            }) => match (side(&a, &left, &right), side(&b, &left, &right)) {
                (Some(true), Some(false)) => {
                    left_keys.push(*a);
                    right_keys.push(*b);
                }
                (Some(false), Some(true)) => {
                    left_keys.push(*b);
                    right_keys.push(*a);
                }
                _ => {
                    return plan_err!(
                    "ASOF JOIN ON supports only equalities between the two sides, got {a} = {b}"
                )
                }
            },
            other => {
                return plan_err!(
                    "ASOF JOIN ON supports only equalities between the two sides, got {other}"
                )
            }
        }
    }
    let (left_time, right_time, op, tolerance) =
        time.ok_or_else(|| plan_datafusion_err!("ASOF JOIN without MATCH_CONDITION"))?;
    Ok(LogicalPlan::Extension(Extension {
        node: Arc::new(AsofJoinNode {
            left,
            right,
            left_keys,
            right_keys,
            left_time,
            right_time,
            op,
            tolerance,
            schema: j.schema,
        }),
    }))
}

/// A tolerance literal (an interval without months, or an integer number
/// of nanoseconds) in nanoseconds.
fn tolerance_ns(e: &Expr) -> Result<i64> {
    let mut e = e;
    while let Expr::Cast(c) = e {
        e = &c.expr;
    }
    let ns = match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            i64::from(v.days)
                .checked_mul(86_400_000_000_000)
                .and_then(|d| d.checked_add(v.nanoseconds))
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => i64::from(v.days)
            .checked_mul(86_400_000_000_000)
            .and_then(|d| d.checked_add(i64::from(v.milliseconds) * 1_000_000)),
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
        Expr::Literal(ScalarValue::Int32(Some(v)), _) => Some(i64::from(*v)),
        Expr::Literal(ScalarValue::UInt64(Some(v)), _) => i64::try_from(*v).ok(),
        _ => None,
    };
    match ns {
        Some(ns) if ns >= 0 => Ok(ns),
        _ => plan_err!(
            "ASOF JOIN tolerance must be a constant non-negative interval without months (e.g. INTERVAL '500 milliseconds') or a number of nanoseconds, got {e}"
        ),
    }
}

/// Replaces marked left joins with `AsofJoinNode`s.
#[derive(Debug, Default)]
pub struct AsofRule;

impl AnalyzerRule for AsofRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| match p {
            LogicalPlan::Join(j) if has_marker(&j) => {
                if j.join_type != JoinType::Left {
                    return plan_err!("ASOF JOIN was planned as a {} join", j.join_type);
                }
                Ok(Transformed::yes(to_node(j)?))
            }
            p => Ok(Transformed::no(p)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tickdb_asof_join"
    }
}

/// Carries constant filters on a left join key over to the right key:
/// `... ASOF JOIN quote q ON t.sym = q.sym WHERE t.sym = 'AAPL'` reads only
/// AAPL's quotes (through the symbol index) instead of every quote. Only
/// rows with an equal key can match, so the right rows it drops could never
/// be chosen. Runs as an optimizer rule, after DataFusion has pushed the
/// `WHERE` into the left scan; the filter it adds is then pushed into the
/// right scan on the next pass.
#[derive(Debug, Default)]
pub struct AsofKeyFilterRule;

/// A filter over an as-of join: the conjuncts that read only left columns
/// go below the join, into the left input (each left row gives exactly one
/// output row, so filtering before or after is the same). DataFusion's own
/// pushdown cannot do it: for an extension node it pushes a predicate into
/// every input or none, and it tells columns apart by unqualified name,
/// which the two sides share (`time`, `sym`).
fn push_left_filters(f: &datafusion::logical_expr::Filter) -> Result<Option<LogicalPlan>> {
    // A projection between the filter and the join (DataFusion leaves the
    // filter above it when it cannot push into the join): go through it
    // when it only passes columns on.
    if let LogicalPlan::Projection(p) = f.input.as_ref() {
        if !matches!(p.input.as_ref(), LogicalPlan::Extension(_)) {
            return Ok(None);
        }
        let through = |e: Expr| -> Option<Expr> {
            e.transform(|x| match x {
                Expr::Column(c) => {
                    let i = p.schema.index_of_column(&c)?;
                    match p.expr[i].clone().unalias() {
                        col @ Expr::Column(_) => Ok(Transformed::yes(col)),
                        _ => plan_err!("not a plain column"),
                    }
                }
                other => Ok(Transformed::no(other)),
            })
            .ok()
            .map(|t| t.data)
        };
        let (mut below, mut above) = (Vec::new(), Vec::new());
        for c in split_conjunction_owned(f.predicate.clone()) {
            match through(c.clone()) {
                Some(e) => below.push(e),
                None => above.push(c),
            }
        }
        let Some(pred) = below.into_iter().reduce(Expr::and) else {
            return Ok(None);
        };
        let inner = datafusion::logical_expr::Filter::try_new(pred, p.input.clone())?;
        let Some(join) = push_left_filters(&inner)? else {
            return Ok(None);
        };
        let proj = LogicalPlan::Projection(datafusion::logical_expr::Projection::try_new(
            p.expr.clone(),
            Arc::new(join),
        )?);
        return Ok(Some(match above.into_iter().reduce(Expr::and) {
            Some(k) => datafusion::logical_expr::LogicalPlanBuilder::from(proj)
                .filter(k)?
                .build()?,
            None => proj,
        }));
    }
    let LogicalPlan::Extension(ext) = f.input.as_ref() else {
        return Ok(None);
    };
    let Some(n) = ext.node.as_any().downcast_ref::<AsofJoinNode>() else {
        return Ok(None);
    };
    let (push, keep): (Vec<Expr>, Vec<Expr>) = split_conjunction_owned(f.predicate.clone())
        .into_iter()
        .partition(|e| {
            let cols = e.column_refs();
            !cols.is_empty()
                && !e.is_volatile()
                && cols.iter().all(|c| n.left.schema().has_column(c))
        });
    let Some(pushed) = push.into_iter().reduce(Expr::and) else {
        return Ok(None);
    };
    let left = datafusion::logical_expr::LogicalPlanBuilder::from(n.left.clone())
        .filter(pushed)?
        .build()?;
    let join = LogicalPlan::Extension(Extension {
        node: Arc::new(AsofJoinNode { left, ..n.clone() }),
    });
    Ok(Some(match keep.into_iter().reduce(Expr::and) {
        Some(k) => datafusion::logical_expr::LogicalPlanBuilder::from(join)
            .filter(k)?
            .build()?,
        None => join,
    }))
}

/// `col = literal` / `col IN (literals)` conjuncts found in a plan's
/// filters and scans, through aliases and filters only (no projection that
/// could rename a column): column name → allowed values.
fn key_constants(plan: &LogicalPlan, out: &mut HashMap<String, Vec<ScalarValue>>) {
    let mut take = |e: &Expr| {
        for c in split_conjunction_owned(e.clone()) {
            match c {
                Expr::BinaryExpr(BinaryExpr {
                    left,
                    op: Operator::Eq,
                    right,
                }) => match (*left, *right) {
                    (Expr::Column(col), Expr::Literal(v, _))
                    | (Expr::Literal(v, _), Expr::Column(col)) => {
                        out.entry(col.name).or_default().push(v);
                    }
                    _ => {}
                },
                Expr::InList(il) if !il.negated => {
                    if let Expr::Column(col) = *il.expr {
                        let vals: Option<Vec<ScalarValue>> = il
                            .list
                            .into_iter()
                            .map(|e| match e {
                                Expr::Literal(v, _) => Some(v),
                                _ => None,
                            })
                            .collect();
                        if let Some(v) = vals {
                            out.entry(col.name).or_default().extend(v);
                        }
                    }
                }
                _ => {}
            }
        }
    };
    match plan {
        LogicalPlan::Filter(f) => {
            take(&f.predicate);
            key_constants(&f.input, out);
        }
        LogicalPlan::SubqueryAlias(a) => key_constants(&a.input, out),
        LogicalPlan::TableScan(t) => {
            for f in &t.filters {
                take(f);
            }
        }
        _ => {}
    }
}

impl datafusion::optimizer::OptimizerRule for AsofKeyFilterRule {
    fn name(&self) -> &str {
        "tickdb_asof_key_filter"
    }

    fn apply_order(&self) -> Option<datafusion::optimizer::ApplyOrder> {
        Some(datafusion::optimizer::ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if let LogicalPlan::Filter(f) = &plan {
            return push_left_filters(f).map(|t| match t {
                Some(p) => Transformed::yes(p),
                None => Transformed::no(plan),
            });
        }
        let LogicalPlan::Extension(ext) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let Some(n) = ext.node.as_any().downcast_ref::<AsofJoinNode>() else {
            return Ok(Transformed::no(plan));
        };
        let mut left = HashMap::new();
        key_constants(&n.left, &mut left);
        let mut right = HashMap::new();
        key_constants(&n.right, &mut right);
        let mut preds = Vec::new();
        for (lk, rk) in n.left_keys.iter().zip(&n.right_keys) {
            let (Expr::Column(lc), Expr::Column(rc)) = (lk, rk) else {
                continue;
            };
            // Already filtered on the right (by us or the user): leave it,
            // which also makes the rule reach a fixed point.
            if right.contains_key(&rc.name) {
                continue;
            }
            if let Some(vals) = left.get(&lc.name) {
                let list: Vec<Expr> = vals
                    .iter()
                    .map(|v| Expr::Literal(v.clone(), None))
                    .collect();
                preds.push(Expr::Column(rc.clone()).in_list(list, false));
            }
        }
        let Some(pred) = preds.into_iter().reduce(Expr::and) else {
            return Ok(Transformed::no(plan));
        };
        let new_right = datafusion::logical_expr::LogicalPlanBuilder::from(n.right.clone())
            .filter(pred)?
            .build()?;
        let node = AsofJoinNode {
            right: new_right,
            ..n.clone()
        };
        Ok(Transformed::yes(LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        })))
    }
}

// ---------------------------------------------------------------------------
// 4. Physical planning
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
pub struct AsofPlanner;

#[async_trait::async_trait]
impl ExtensionPlanner for AsofPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<AsofJoinNode>() else {
            return Ok(None);
        };
        let (ls, rs) = (logical_inputs[0].schema(), logical_inputs[1].schema());
        let phys = |e: &Expr, s: &datafusion::common::DFSchema| {
            planner.create_physical_expr(e, s, session, planning_ctx)
        };
        let left_keys = n
            .left_keys
            .iter()
            .map(|e| phys(e, ls))
            .collect::<Result<Vec<_>>>()?;
        let right_keys = n
            .right_keys
            .iter()
            .map(|e| phys(e, rs))
            .collect::<Result<Vec<_>>>()?;
        let exec = AsofJoinExec::new(
            physical_inputs[0].clone(),
            physical_inputs[1].clone(),
            left_keys,
            right_keys,
            phys(&n.left_time, ls)?,
            phys(&n.right_time, rs)?,
            n.op,
            n.tolerance,
            Arc::new(n.schema.as_arrow().clone()),
        );
        Ok(Some(Arc::new(exec)))
    }
}

/// The session's query planner: DataFusion's, plus the as-of join.
#[derive(Debug)]
pub struct TickQueryPlanner {
    /// The time limit of a plan whose session carries no query context
    /// (every query the engine starts carries one).
    timeout: std::time::Duration,
}

impl TickQueryPlanner {
    pub fn new(timeout: std::time::Duration) -> Self {
        TickQueryPlanner { timeout }
    }
}

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for TickQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(AsofPlanner)])
            .create_physical_plan(logical_plan, session)
            .await?;
        // Here, not in one front, so that every front gets the same limits:
        // the query's own context (deadline, cancellation) when the session
        // carries one, a fresh one with the engine's timeout otherwise.
        let ctx = session
            .config()
            .get_extension::<crate::context::QueryCtx>()
            .map(|c| c.as_ref().clone())
            .or_else(|| crate::context::CURRENT_QUERY.try_with(|c| c.clone()).ok())
            .unwrap_or_else(|| crate::context::QueryCtx::new(self.timeout));
        crate::deadline::wrap(plan, &ctx)
    }
}

/// The marker UDF, for registration in a session.
pub fn marker_udf() -> ScalarUDF {
    ScalarUDF::from(AsofMarker {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

// ---------------------------------------------------------------------------
// 5. Execution
// ---------------------------------------------------------------------------

type PExpr = Arc<dyn PhysicalExpr>;
type SharedRight =
    Shared<BoxFuture<'static, std::result::Result<Arc<RightSide>, Arc<DataFusionError>>>>;

pub struct AsofJoinExec {
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    left_keys: Vec<PExpr>,
    right_keys: Vec<PExpr>,
    left_time: PExpr,
    right_time: PExpr,
    op: AsofOp,
    tolerance: Option<i64>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    right_side: Mutex<Option<SharedRight>>,
}

impl fmt::Debug for AsofJoinExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AsofJoinExec")
    }
}

impl AsofJoinExec {
    #[allow(clippy::too_many_arguments)]
    fn new(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
        left_keys: Vec<PExpr>,
        right_keys: Vec<PExpr>,
        left_time: PExpr,
        right_time: PExpr,
        op: AsofOp,
        tolerance: Option<i64>,
        schema: SchemaRef,
    ) -> AsofJoinExec {
        let partitions = left.output_partitioning().partition_count();
        // Left rows come out in their input order, as the output's first
        // columns at the same indices: the left side's ordering holds for
        // the output, so a sort the optimizer pushed below the join is
        // still seen above it.
        let eq = match left.output_ordering() {
            Some(ord) => EquivalenceProperties::new_with_orderings(
                schema.clone(),
                [ord.iter().cloned().collect::<Vec<_>>()],
            ),
            None => EquivalenceProperties::new(schema.clone()),
        };
        let properties = Arc::new(PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        AsofJoinExec {
            left,
            right,
            left_keys,
            right_keys,
            left_time,
            right_time,
            op,
            tolerance,
            schema,
            properties,
            right_side: Mutex::new(None),
        }
    }

    /// For each right column: the left column it equals on every matched
    /// row, when it is a right key column compared for equality with a
    /// left key column of the same type (`t.sym = q.sym`). Such a column is
    /// the left one with nulls where nothing matched, which is far cheaper
    /// than gathering it from the right side's batches (a dictionary
    /// column's gather merges every batch's dictionary).
    fn right_keys_from_left(&self) -> Result<Vec<Option<usize>>> {
        use datafusion::physical_expr::expressions::Column;
        let (ls, rs) = (self.left.schema(), self.right.schema());
        let mut out = vec![None; rs.fields().len()];
        for (l, r) in self.left_keys.iter().zip(&self.right_keys) {
            let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>())
            else {
                continue;
            };
            let (lt, rt) = (
                ls.field(l.index()).data_type(),
                rs.field(r.index()).data_type(),
            );
            // Equal keys are equal values only where equality is identity:
            // strings and integers (not floats: -0.0 = 0.0).
            let exact = |t: &DataType| match t {
                DataType::Dictionary(_, v) => matches!(
                    v.as_ref(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
                t => t.is_integer(),
            };
            if lt == rt && exact(lt) {
                out[r.index()] = Some(l.index());
            }
        }
        Ok(out)
    }

    fn right_side(&self, ctx: Arc<TaskContext>) -> SharedRight {
        let mut guard = self.right_side.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &*guard {
            return f.clone();
        }
        let right = self.right.clone();
        let keys = self.right_keys.clone();
        let time = self.right_time.clone();
        let fut = async move {
            build_right(right, keys, time, ctx)
                .await
                .map(Arc::new)
                .map_err(Arc::new)
        }
        .boxed()
        .shared();
        *guard = Some(fut.clone());
        fut
    }
}

impl DisplayAs for AsofJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "AsofJoinExec: {} {} {}",
            self.left_time,
            self.op.sql(),
            self.right_time
        )?;
        for (l, r) in self.left_keys.iter().zip(&self.right_keys) {
            write!(f, ", {l} = {r}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for AsofJoinExec {
    fn name(&self) -> &'static str {
        "AsofJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.left, &self.right]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true, false]
    }

    /// The left side's statistics, at the same partition; not the right's.
    fn child_stats_requests(
        &self,
        partition: Option<usize>,
    ) -> Vec<datafusion::physical_plan::statistics::ChildStats> {
        use datafusion::physical_plan::statistics::ChildStats;
        vec![ChildStats::At(partition), ChildStats::Skip]
    }

    /// One output row per left row (matched or not), in the left row's
    /// partition. Given as an estimate: it lets the planner keep a small
    /// join on one thread (the monitor's one-symbol join), and an estimate
    /// is never used to answer `count(*)` without running the join.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<datafusion::common::Statistics>],
        _args: &datafusion::physical_plan::statistics::StatisticsArgs,
    ) -> Result<Arc<datafusion::common::Statistics>> {
        let mut stats = datafusion::common::Statistics::new_unknown(&self.schema());
        if let Some(left) = input_stats.first() {
            stats.num_rows = left.num_rows.to_inexact();
        }
        Ok(Arc::new(stats))
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let exprs = self
            .left_keys
            .iter()
            .chain(&self.right_keys)
            .chain([&self.left_time, &self.right_time]);
        apply_expression_roots(exprs, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [left, right] = <[Arc<dyn ExecutionPlan>; 2]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("AsofJoinExec takes two children".into()))?;
        Ok(Arc::new(AsofJoinExec::new(
            left,
            right,
            self.left_keys.clone(),
            self.right_keys.clone(),
            self.left_time.clone(),
            self.right_time.clone(),
            self.op,
            self.tolerance,
            self.schema.clone(),
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let right = self.right_side(ctx.clone());
        let left = self.left.execute(partition, ctx)?;
        let probe = Probe {
            keys: self.left_keys.clone(),
            time: self.left_time.clone(),
            op: self.op,
            tolerance: self.tolerance,
            schema: self.schema.clone(),
            cache: DictCache::default(),
            from_left: self.right_keys_from_left()?,
            hints: Vec::new(),
            cursor: None,
        };
        struct St {
            right: Option<SharedRight>,
            side: Option<Arc<RightSide>>,
            left: SendableRecordBatchStream,
            probe: Probe,
            done: bool,
        }
        let st = St {
            right: Some(right),
            side: None,
            left,
            probe,
            done: false,
        };
        let stream = futures::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            if st.side.is_none() {
                match st.right.take().expect("right future").await {
                    Ok(s) => st.side = Some(s),
                    Err(e) => {
                        st.done = true;
                        return Some((Err(DataFusionError::Shared(e)), st));
                    }
                }
            }
            match st.left.next().await {
                None => None,
                Some(Err(e)) => {
                    st.done = true;
                    Some((Err(e), st))
                }
                Some(Ok(b)) => {
                    let side = st.side.clone().expect("built above");
                    let r = st.probe.batch(&side, &b);
                    st.done = r.is_err();
                    Some((r, st))
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// Times as i64 (nanoseconds for timestamps).
fn time_values(a: &ArrayRef) -> Result<Int64Array> {
    let a = match a.data_type() {
        DataType::Timestamp(TimeUnit::Nanosecond, _) | DataType::Int64 => a.clone(),
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            cast(a, &DataType::Timestamp(TimeUnit::Nanosecond, None))?
        }
        t if t.is_integer() => a.clone(),
        t => return exec_err!("ASOF JOIN times must be timestamps or integers, got {t}"),
    };
    let a = if a.data_type() == &DataType::Int64 {
        a
    } else {
        cast(&a, &DataType::Int64)?
    };
    Ok(a.as_primitive::<Int64Type>().clone())
}

fn evaluate(exprs: &[PExpr], b: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(b).and_then(|v| v.into_array(b.num_rows())))
        .collect()
}

/// Key values → dense group ids. One string key (the symbol column, as a
/// dictionary or plain strings) is looked up by value, its dictionary
/// translated once per distinct values array; other keys go through
/// Arrow's row format.
#[derive(Default)]
struct KeyIndex {
    strings: HashMap<String, u32>,
    rows: HashMap<Vec<u8>, u32>,
    next: u32,
}

/// Translation of the last dictionary seen: the values array (held, so
/// its identity cannot be reused), its values as strings, and the id of
/// each value a row has used so far (`DICT_UNSEEN` until one does). A
/// value is translated when a row first uses it: a table's dictionary
/// holds every symbol it has seen, while a query (one symbol's as-of
/// join) may use one of them.
#[derive(Default)]
struct DictCache {
    values: Option<ArrayRef>,
    strings: Option<ArrayRef>,
    ids: Vec<u32>,
}

/// `DictCache::ids`: not translated yet.
const DICT_UNSEEN: u32 = u32::MAX;
/// `DictCache::ids`: a null value, or one the id source does not know.
const DICT_NO_ID: u32 = u32::MAX - 1;

impl DictCache {
    /// The id of dictionary value `x`, translating it on first use.
    fn id(&mut self, x: usize, src: &mut impl IdSource) -> Option<u32> {
        let slot = self.ids.get(x).copied()?;
        let id = if slot == DICT_UNSEEN {
            let vs = self.strings.as_ref()?.as_string::<i32>();
            let id = if vs.is_null(x) {
                None
            } else {
                src.string_id(vs.value(x))
            };
            self.ids[x] = id.unwrap_or(DICT_NO_ID);
            id
        } else {
            (slot != DICT_NO_ID).then_some(slot)
        };
        id
    }
}

fn is_string_key(types: &[DataType]) -> bool {
    match types {
        [DataType::Dictionary(_, v)] => matches!(
            v.as_ref(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ),
        [DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View] => true,
        _ => false,
    }
}

fn converter_for(types: &[DataType]) -> Result<Option<RowConverter>> {
    if is_string_key(types) || types.is_empty() {
        Ok(None)
    } else {
        Ok(Some(RowConverter::new(
            types.iter().map(|t| SortField::new(t.clone())).collect(),
        )?))
    }
}

/// How ids are found: inserting new keys (build side) or looking up only
/// (probe side, where the index is shared read-only).
trait IdSource {
    fn string_id(&mut self, s: &str) -> Option<u32>;
    fn row_id(&mut self, r: &[u8]) -> Option<u32>;
}

struct Insert<'a>(&'a mut KeyIndex);
struct Lookup<'a>(&'a KeyIndex);

impl IdSource for Insert<'_> {
    fn string_id(&mut self, s: &str) -> Option<u32> {
        if let Some(id) = self.0.strings.get(s) {
            return Some(*id);
        }
        let id = self.0.next;
        self.0.next += 1;
        self.0.strings.insert(s.to_string(), id);
        Some(id)
    }

    fn row_id(&mut self, r: &[u8]) -> Option<u32> {
        if let Some(id) = self.0.rows.get(r) {
            return Some(*id);
        }
        let id = self.0.next;
        self.0.next += 1;
        self.0.rows.insert(r.to_vec(), id);
        Some(id)
    }
}

impl IdSource for Lookup<'_> {
    fn string_id(&mut self, s: &str) -> Option<u32> {
        self.0.strings.get(s).copied()
    }

    fn row_id(&mut self, r: &[u8]) -> Option<u32> {
        self.0.rows.get(r).copied()
    }
}

/// Group id of each row (None: a null key, or a key the source lacks).
fn key_ids(
    keys: &[ArrayRef],
    converter: Option<&RowConverter>,
    src: &mut impl IdSource,
    cache: &mut DictCache,
) -> Result<Vec<Option<u32>>> {
    let Some(k) = keys.first() else {
        return Ok(Vec::new());
    };
    let n = k.len();
    match converter {
        None => {
            if let Some(d) = k.as_any_dictionary_opt() {
                let same = cache
                    .values
                    .as_ref()
                    .is_some_and(|v| Arc::ptr_eq(v, d.values()));
                if !same {
                    cache.strings = Some(cast(d.values(), &DataType::Utf8)?);
                    cache.ids = vec![DICT_UNSEEN; d.values().len()];
                    cache.values = Some(d.values().clone());
                }
                // The rdb's symbol column (u32 keys, no nulls): straight
                // from the key buffer, no per-row null check.
                if let (Some(d32), 0) = (k.as_dictionary_opt::<UInt32Type>(), k.null_count()) {
                    return Ok(d32
                        .keys()
                        .values()
                        .iter()
                        .map(|&x| cache.id(x as usize, src))
                        .collect());
                }
                let ks = d.normalized_keys();
                return Ok((0..n)
                    .map(|i| {
                        if k.is_null(i) {
                            None
                        } else {
                            cache.id(ks[i], src)
                        }
                    })
                    .collect());
            }
            let s = cast(k, &DataType::Utf8)?;
            let s = s.as_string::<i32>();
            Ok((0..n)
                .map(|i| {
                    if s.is_null(i) {
                        None
                    } else {
                        src.string_id(s.value(i))
                    }
                })
                .collect())
        }
        Some(conv) => {
            let rows = conv.convert_columns(keys)?;
            Ok((0..n)
                .map(|i| {
                    if keys.iter().any(|k| k.is_null(i)) {
                        None
                    } else {
                        src.row_id(rows.row(i).as_ref())
                    }
                })
                .collect())
        }
    }
}

/// One key's right rows, sorted by time (arrival order among equal times).
#[derive(Default)]
struct Run {
    times: Vec<i64>,
    locs: Vec<(u32, u32)>,
}

/// `times.partition_point(pred)` for a `pred` true then false, starting
/// from `hint`, the answer for this key's previous probe. Left rows of one
/// key usually come in time order, so the answer moves forward a little
/// each time: galloping from the hint costs O(log distance) and reads
/// memory next to the last probe's, where a binary search over the whole
/// run costs O(log n) cache misses per row. A probe that went back in time
/// searches the part before the hint.
fn partition_point_from(times: &[i64], hint: usize, pred: impl Fn(i64) -> bool) -> usize {
    let hint = hint.min(times.len());
    if hint > 0 && !pred(times[hint - 1]) {
        return times[..hint].partition_point(|&x| pred(x));
    }
    // pred holds for everything before `hint`: gallop forward.
    let mut lo = hint;
    let mut step = 1;
    while lo + step <= times.len() && pred(times[lo + step - 1]) {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step).min(times.len());
    lo + times[lo..hi].partition_point(|&x| pred(x))
}

impl Run {
    /// The matching right row for time `t`, and the partition point to
    /// start this key's next probe from.
    fn find(
        &self,
        t: i64,
        op: AsofOp,
        tolerance: Option<i64>,
        hint: usize,
    ) -> (Option<(u32, u32)>, usize) {
        let len = self.times.len();
        let p = match op {
            AsofOp::Ge | AsofOp::Lt => partition_point_from(&self.times, hint, |x| x <= t),
            AsofOp::Gt | AsofOp::Le => partition_point_from(&self.times, hint, |x| x < t),
        };
        (self.found(t, op, tolerance, p, len), p)
    }

    fn found(
        &self,
        t: i64,
        op: AsofOp,
        tolerance: Option<i64>,
        p: usize,
        len: usize,
    ) -> Option<(u32, u32)> {
        let i = match op {
            AsofOp::Ge | AsofOp::Gt => p.checked_sub(1)?,
            AsofOp::Le | AsofOp::Lt => Some(p).filter(|&p| p < len)?,
        };
        within(t, self.times[i], tolerance).then(|| self.locs[i])
    }

    fn sort(&mut self) {
        if self.times.is_sorted() {
            return;
        }
        let mut order: Vec<u32> = (0..self.times.len() as u32).collect();
        // Stable: equal times keep arrival order.
        order.sort_by_key(|&i| self.times[i as usize]);
        self.times = order.iter().map(|&i| self.times[i as usize]).collect();
        self.locs = order.iter().map(|&i| self.locs[i as usize]).collect();
    }
}

/// The right side, read once: its columns (batch by batch, plus a last
/// one-row all-null batch for unmatched left rows), each batch's times and
/// key ids in arrival order (`Merge`), and, built on first need, a run per
/// key.
struct RightSide {
    columns: Vec<Vec<ArrayRef>>,
    null_batch: u32,
    index: KeyIndex,
    converter: Option<RowConverter>,
    merge: Merge,
    runs: OnceLock<Vec<Run>>,
    _reservation: MemoryReservation,
}

impl RightSide {
    fn keys(&self) -> usize {
        (self.index.next as usize).max(1)
    }

    /// Each key's rows sorted by time: only for left rows a cursor cannot
    /// answer (the right side or the left stream out of time order, or a
    /// forward-looking `<=`/`<`).
    fn runs(&self) -> &[Run] {
        self.runs.get_or_init(|| {
            let mut runs: Vec<Run> = Vec::new();
            runs.resize_with(self.keys(), Run::default);
            for b in self.merge.batches() {
                let times = b.times.values();
                for (r, &id) in b.ids.iter().enumerate() {
                    if id != NO_KEY && b.times.is_valid(r) {
                        let run = &mut runs[id as usize];
                        run.times.push(times[r]);
                        run.locs.push((b.src, r as u32));
                    }
                }
            }
            for r in &mut runs {
                r.sort();
            }
            runs
        })
    }
}

/// Bytes of index per right row: time and key id, and as much again for
/// runs should they be built.
const INDEX_BYTES_PER_ROW: usize = 24;

async fn build_right(
    right: Arc<dyn ExecutionPlan>,
    keys: Vec<PExpr>,
    time: PExpr,
    ctx: Arc<TaskContext>,
) -> Result<RightSide> {
    let reservation = MemoryConsumer::new("AsofJoinExec[right]").register(ctx.memory_pool());
    let schema = right.schema();
    let key_types = keys
        .iter()
        .map(|k| k.data_type(&schema))
        .collect::<Result<Vec<_>>>()?;
    let converter = converter_for(&key_types)?;
    let mut index = KeyIndex::default();
    let mut cache = DictCache::default();
    let mut merge: Vec<MergeBatch> = Vec::new();
    let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::new(); schema.fields().len()];
    let mut batches = 0u32;
    for p in 0..right.output_partitioning().partition_count() {
        let mut s = right.execute(p, ctx.clone())?;
        while let Some(b) = s.next().await {
            let b = b?;
            let n = b.num_rows();
            if n == 0 {
                continue;
            }
            reservation.try_grow(n * INDEX_BYTES_PER_ROW + b.get_array_memory_size() / 8)?;
            let ids = if keys.is_empty() {
                vec![0; n]
            } else {
                key_ids(
                    &evaluate(&keys, &b)?,
                    converter.as_ref(),
                    &mut Insert(&mut index),
                    &mut cache,
                )?
                .into_iter()
                .map(|id| id.unwrap_or(NO_KEY))
                .collect()
            };
            let times = time_values(&time.evaluate(&b)?.into_array(n)?)?;
            merge.push(MergeBatch {
                src: batches,
                times,
                ids,
            });
            for (c, a) in b.columns().iter().enumerate() {
                columns[c].push(a.clone());
            }
            batches += 1;
        }
    }
    for (c, f) in schema.fields().iter().enumerate() {
        columns[c].push(new_null_array(f.data_type(), 1));
    }
    Ok(RightSide {
        columns,
        null_batch: batches,
        index,
        converter,
        merge: Merge::new(merge),
        runs: OnceLock::new(),
        _reservation: reservation,
    })
}

struct Probe {
    keys: Vec<PExpr>,
    time: PExpr,
    op: AsofOp,
    tolerance: Option<i64>,
    schema: SchemaRef,
    cache: DictCache,
    /// Right columns taken from the left side (`right_keys_from_left`).
    from_left: Vec<Option<usize>>,
    /// Per key, where its previous probe landed in its run.
    hints: Vec<usize>,
    /// This left stream's walk over a time-ordered right side (`>=`, `>`).
    cursor: Option<Cursor>,
}

/// Whether a match at time `at` is within the tolerance of time `t`.
fn within(t: i64, at: i64, tolerance: Option<i64>) -> bool {
    tolerance.is_none_or(|tol| (i128::from(t) - i128::from(at)).abs() <= i128::from(tol))
}

impl Probe {
    /// The match for key `g` at time `t` from the key's run, galloping
    /// from where its previous probe landed.
    fn find_in_runs(&mut self, side: &RightSide, g: u32, t: i64) -> Option<(u32, u32)> {
        let runs = side.runs();
        if self.hints.len() < runs.len() {
            self.hints.resize(runs.len(), 0);
        }
        let run = runs.get(g as usize)?;
        let (loc, p) = run.find(t, self.op, self.tolerance, self.hints[g as usize]);
        self.hints[g as usize] = p;
        loc
    }

    fn batch(&mut self, side: &RightSide, b: &RecordBatch) -> Result<RecordBatch> {
        let n = b.num_rows();
        let ids = if self.keys.is_empty() {
            vec![Some(0); n]
        } else {
            key_ids(
                &evaluate(&self.keys, b)?,
                side.converter.as_ref(),
                &mut Lookup(&side.index),
                &mut self.cache,
            )?
        };
        let times = time_values(&self.time.evaluate(b)?.into_array(n)?)?;
        let null = (side.null_batch as usize, 0usize);
        let mut take = Vec::with_capacity(n);
        if self.cursor.is_none() && side.merge.ordered() {
            self.cursor = match self.op {
                AsofOp::Ge => Some(Cursor::new(side.keys(), false)),
                AsofOp::Gt => Some(Cursor::new(side.keys(), true)),
                AsofOp::Le | AsofOp::Lt => None,
            };
        }
        let no_nulls = times.null_count() == 0;
        if let Some(c) = self
            .cursor
            .as_mut()
            .filter(|c| no_nulls && c.can_walk(times.values()))
        {
            // A left batch in time order: one merge answers all of it.
            let lids: Vec<u32> = ids.iter().map(|id| id.unwrap_or(NO_KEY)).collect();
            let mut found = Vec::new();
            c.walk_sorted(&side.merge, &lids, times.values(), &mut found);
            for ((id, &(at, time)), &t) in ids.iter().zip(&found).zip(times.values()) {
                let hit = id.is_some() && at != NO_ROW && within(t, time, self.tolerance);
                take.push(if hit {
                    ((at >> 32) as usize, (at as u32) as usize)
                } else {
                    null
                });
            }
            return self.output(side, b, take, null);
        }
        for (r, id) in ids.iter().enumerate() {
            let loc = match (id, no_nulls || times.is_valid(r)) {
                (Some(g), true) => {
                    let t = times.value(r);
                    let walked = match &mut self.cursor {
                        Some(c) => c.seek(&side.merge, t).then(|| c.last(*g)),
                        None => None,
                    };
                    match walked {
                        Some(m) => m.and_then(|(b, row, at)| {
                            within(t, at, self.tolerance).then_some((b, row))
                        }),
                        None => self.find_in_runs(side, *g, t),
                    }
                }
                _ => None,
            };
            take.push(loc.map(|(b, r)| (b as usize, r as usize)).unwrap_or(null));
        }
        self.output(side, b, take, null)
    }

    /// The output batch: the left columns, then each right column gathered
    /// at `take` (or taken from the left where keys equal).
    fn output(
        &self,
        side: &RightSide,
        b: &RecordBatch,
        take: Vec<(usize, usize)>,
        null: (usize, usize),
    ) -> Result<RecordBatch> {
        let unmatched: Option<BooleanArray> =
            self.from_left.iter().any(Option::is_some).then(|| {
                take.iter()
                    .map(|&(batch, _)| Some(batch == null.0))
                    .collect()
            });
        let mut cols: Vec<ArrayRef> = b.columns().to_vec();
        for (i, c) in side.columns.iter().enumerate() {
            match (self.from_left.get(i).copied().flatten(), &unmatched) {
                (Some(l), Some(unmatched)) => {
                    cols.push(datafusion::arrow::compute::nullif(b.column(l), unmatched)?)
                }
                _ => {
                    let refs: Vec<&dyn Array> = c.iter().map(|a| a.as_ref()).collect();
                    cols.push(interleave(&refs, &take)?);
                }
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

/// Registers the marker function and the rule that plans ASOF joins.
pub fn register(ctx: &datafusion::prelude::SessionContext) {
    ctx.register_udf(marker_udf());
    ctx.add_analyzer_rule(Arc::new(AsofRule));
    ctx.add_optimizer_rule(Arc::new(AsofKeyFilterRule));
}

#[cfg(test)]
mod tests {
    use super::partition_point_from;
    use rand::{Rng, SeedableRng};

    #[test]
    fn galloping_from_any_hint_finds_the_partition_point() {
        let seed = tickdb_core::testing::seed("galloping");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..2000 {
            let n = rng.random_range(0..200);
            let mut times: Vec<i64> = (0..n).map(|_| rng.random_range(0..50)).collect();
            times.sort();
            let t = rng.random_range(-5..60);
            let hint = rng.random_range(0..n + 3);
            for strict in [false, true] {
                let pred = |x: i64| if strict { x < t } else { x <= t };
                assert_eq!(
                    partition_point_from(&times, hint, pred),
                    times.partition_point(|&x| pred(x)),
                    "times {times:?} t {t} hint {hint} strict {strict}"
                );
            }
        }
    }
}
