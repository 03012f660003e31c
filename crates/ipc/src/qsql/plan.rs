//! What both select forms (the `select` template and functional `?[...]`)
//! parse into, and how it becomes SQL: resolving names against the
//! catalog, q's result shapes, and the statement text.

use std::collections::{HashMap, HashSet};

use super::lex::Cmp;
use super::lit::Lit;
use super::{nyi, Catalog, QsqlError, Query};

/// A name from the text, with its byte offset for errors.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Name {
    pub text: String,
    pub at: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Agg {
    First,
    Last,
    Max,
    Min,
    Sum,
    Avg,
    Count,
}

impl Agg {
    pub(super) fn from_name(s: &str) -> Option<Agg> {
        Some(match s {
            "first" => Agg::First,
            "last" => Agg::Last,
            "max" => Agg::Max,
            "min" => Agg::Min,
            "sum" => Agg::Sum,
            "avg" => Agg::Avg,
            "count" => Agg::Count,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Col(Name),
    /// `count i` is `Agg(Count, i)`.
    Agg(Agg, Name),
    /// `w wavg x`.
    Wavg {
        w: Name,
        x: Name,
    },
}

impl Expr {
    fn is_agg(&self) -> bool {
        !matches!(self, Expr::Col(_))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Lit(Lit),
    /// q compares with another column when the value is a name.
    Col(Name),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Cond {
    Cmp(Name, Cmp, Val),
    In(Name, Vec<Lit>),
    Within(Name, Val, Val),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Select {
    pub table: Name,
    /// Output name and expression; None for all columns.
    pub cols: Option<Vec<(String, Expr)>>,
    /// Key name and column; empty for no grouping.
    pub by: Vec<(String, Name)>,
    pub conds: Vec<Cond>,
}

/// A SQL identifier: always quoted, so q names that are SQL keywords work.
pub(super) fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The table's columns, or q's `'table` error.
pub(super) fn columns(cat: &dyn Catalog, table: &str) -> Result<Vec<String>, QsqlError> {
    cat.columns(table)
        .ok_or_else(|| QsqlError::UnknownTable(table.to_string()))
}

pub(super) fn unknown_column(n: &Name) -> QsqlError {
    QsqlError::Parse {
        at: n.at,
        why: format!("unknown column {}", n.text),
    }
}

/// q's names for result columns: a repeated name gets the first free
/// numeric suffix (`price`, `price1`, ...), as q does. Sets and a counter
/// per name keep this linear however many columns a query repeats.
#[derive(Default)]
struct Names {
    used: HashSet<String>,
    next: HashMap<String, u64>,
}

impl Names {
    fn take(&mut self, want: &str) -> String {
        let mut name = want.to_string();
        if self.used.contains(&name) {
            let n = self.next.entry(want.to_string()).or_insert(1);
            loop {
                name = format!("{want}{n}");
                *n += 1;
                if !self.used.contains(&name) {
                    break;
                }
            }
        }
        self.used.insert(name.clone());
        name
    }
}

struct Ctx {
    cols: Vec<String>,
    time: Option<String>,
}

impl Ctx {
    /// A column reference; `i` (q's virtual row index) is outside the
    /// subset except in `count i`.
    fn col(&self, n: &Name) -> Result<String, QsqlError> {
        if self.cols.contains(&n.text) {
            Ok(ident(&n.text))
        } else if n.text == "i" {
            Err(nyi())
        } else {
            Err(unknown_column(n))
        }
    }

    /// `first`/`last` follow the table's time column so their order is
    /// guaranteed on any number of partitions.
    fn ordered(&self, f: &str, col: &str) -> Result<String, QsqlError> {
        let t = self.time.as_deref().ok_or_else(nyi)?;
        Ok(format!("{f}({col} ORDER BY {})", ident(t)))
    }

    fn expr(&self, e: &Expr) -> Result<String, QsqlError> {
        Ok(match e {
            Expr::Col(n) => self.col(n)?,
            // q counts items, nulls included: the row count.
            Expr::Agg(Agg::Count, n) if n.text == "i" && !self.cols.contains(&n.text) => {
                "count(*)".to_string()
            }
            Expr::Agg(Agg::Count, n) => {
                self.col(n)?;
                "count(*)".to_string()
            }
            Expr::Agg(a, n) => {
                let c = self.col(n)?;
                match a {
                    Agg::First => self.ordered("first", &c)?,
                    Agg::Last => self.ordered("last", &c)?,
                    Agg::Max => format!("max({c})"),
                    Agg::Min => format!("min({c})"),
                    Agg::Sum => format!("sum({c})"),
                    Agg::Avg => format!("avg({c})"),
                    Agg::Count => "count(*)".to_string(),
                }
            }
            // tickdb's vwap(x, w) is sum(x*w)/sum(w) as a float, skipping
            // rows where either is null: q's `w wavg x`.
            Expr::Wavg { w, x } => {
                let w = self.col(w)?;
                let x = self.col(x)?;
                format!("vwap({x}, {w})")
            }
        })
    }

    fn val(&self, v: &Val) -> Result<String, QsqlError> {
        match v {
            Val::Lit(l) => Ok(l.sql()),
            Val::Col(n) => self.col(n),
        }
    }

    fn cond(&self, c: &Cond) -> Result<String, QsqlError> {
        Ok(match c {
            Cond::Cmp(n, op, v) => format!("{} {} {}", self.col(n)?, op.sql(), self.val(v)?),
            // `x in ()` is false for every row; SQL has no empty IN list.
            Cond::In(n, list) if list.is_empty() => {
                self.col(n)?;
                "FALSE".to_string()
            }
            Cond::In(n, list) => {
                let items: Vec<String> = list.iter().map(Lit::sql).collect();
                format!("{} IN ({})", self.col(n)?, items.join(", "))
            }
            // q's within is inclusive at both ends, as BETWEEN is.
            Cond::Within(n, lo, hi) => format!(
                "{} BETWEEN {} AND {}",
                self.col(n)?,
                self.val(lo)?,
                self.val(hi)?
            ),
        })
    }
}

/// The statement for a select, in q's shape: key columns first, then the
/// values; grouped and sorted by the keys.
pub(super) fn plan(sel: &Select, cat: &dyn Catalog) -> Result<Query, QsqlError> {
    let table = &sel.table.text;
    let cx = Ctx {
        cols: columns(cat, table)?,
        time: cat.time_column(table),
    };
    if let Some(items) = &sel.cols {
        let aggs = items.iter().filter(|(_, e)| e.is_agg()).count();
        // Without aggregation q would return lists per key (with `by`) or
        // broadcast an atom (mixed, without `by`): neither is SQL's shape.
        if (!sel.by.is_empty() && aggs != items.len()) || (aggs != 0 && aggs != items.len()) {
            return Err(nyi());
        }
    }
    let mut names = Names::default();
    let mut select = Vec::new();
    let mut group = Vec::new();
    let mut order = Vec::new();
    for (key, col) in &sel.by {
        let c = cx.col(col)?;
        let name = names.take(key);
        select.push(aliased(c.clone(), &col.text, &name));
        group.push(c);
        order.push(ident(&name));
    }
    match &sel.cols {
        None if sel.by.is_empty() => select.push("*".to_string()),
        None => {
            // `select by k from t`: the last of every other column per key.
            let keys: Vec<&str> = sel.by.iter().map(|(k, _)| k.as_str()).collect();
            for c in cx.cols.iter().filter(|c| !keys.contains(&c.as_str())) {
                let e = cx.ordered("last", &ident(c))?;
                let name = names.take(c);
                select.push(format!("{e} AS {}", ident(&name)));
            }
        }
        Some(items) => {
            for (want, e) in items {
                let sql = cx.expr(e)?;
                let name = names.take(want);
                select.push(match e {
                    Expr::Col(n) => aliased(sql, &n.text, &name),
                    _ => format!("{sql} AS {}", ident(&name)),
                });
            }
        }
    }
    let mut sql = format!("SELECT {} FROM {}", select.join(", "), ident(table));
    let conds = sel
        .conds
        .iter()
        .map(|c| cx.cond(c))
        .collect::<Result<Vec<_>, _>>()?;
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    if !group.is_empty() {
        sql.push_str(&format!(
            " GROUP BY {} ORDER BY {}",
            group.join(", "),
            order.join(", ")
        ));
    }
    Ok(Query::Sql {
        sql,
        keys: sel.by.len(),
    })
}

fn aliased(sql: String, col: &str, name: &str) -> String {
    if col == name {
        sql
    } else {
        format!("{sql} AS {}", ident(name))
    }
}
