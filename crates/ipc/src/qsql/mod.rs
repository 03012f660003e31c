//! A q-sql subset, translated to tickdb's SQL (docs/sql.md).
//!
//! kdb+ clients send q expressions as strings. tickdb does not evaluate
//! q; it answers the documented subset below by translating it into one
//! SQL statement (or a request the server answers itself), and answers
//! everything else with q's `'nyi`. [`translate`] is pure: no I/O, the
//! tables known through a [`Catalog`].
//!
//! # The subset
//!
//! Leading and trailing whitespace is ignored; keywords are case-sensitive,
//! as in q. `t`, `q` are table names, `c`, `w`, `x` column names (q names:
//! a letter, then letters, digits and `_`).
//!
//! - `select [cols] [by keys] from t [where conds]`
//!   - `select from t`: every column.
//!   - cols, comma-separated, each `name:expr` or `expr`, where expr is a
//!     column `c`, or an aggregate `first c`, `last c`, `max c`, `min c`,
//!     `sum c`, `avg c`, `count c`, `count i` (the row count), also written
//!     `max[c]` or `max(c)`, or `w wavg x` / `wavg[w;x]`. An unnamed column
//!     is named as in q: after its argument (`max price` is `price`,
//!     `size wavg price` is `price`), `count i` is `x`; a repeated name
//!     gets a numeric suffix (`price1`).
//!   - Only columns: a projection. Only aggregates: one row. Mixing the
//!     two without `by` is not in the subset.
//!   - keys, comma-separated, each `c` or `name:c`. The result is keyed:
//!     key columns first, then the aggregates (which must all be
//!     aggregates), one row per key, sorted by the keys.
//!   - `select by keys from t`: the last value (by time) of every other
//!     column, per key.
//!   - conds, comma-separated and all required: `c = v`, `c < v`, `c > v`,
//!     `c <= v`, `c >= v`, `c <> v` (v a literal or a column), `c in v`
//!     (v one symbol `` `a ``, a symbol vector `` `a`b ``, a number vector
//!     `1 2 3`, or a list `` (`a;`b) ``), `c within (a;b)` / `c within a b`
//!     (inclusive at both ends).
//! - `aj[`sym`time; t; q]`: the as-of join. The last join column is the
//!   time column, the others must be equal. Every column of `t`, then every
//!   column of `q` that `t` lacks.
//! - `?[t; c; b; a]`, functional select; `t` is `t` or `` `t ``.
//!   - c: `()`, `enlist(op;`c;v)` or `((op;`c;v);(op;`c;v))`, op one of
//!     `=` `<` `>` `<=` `>=` `<>` `in` `within`; v a literal, `` enlist`s ``,
//!     a symbol vector `` `a`b ``, a list `(a;b)`, or a symbol atom
//!     `` `c `` (a column, as in any parse tree).
//!   - b: `0b` or `()` for no grouping, or a dictionary of key names to
//!     columns: `` (enlist`k)!enlist`c ``, `` `k1`k2!`c1`c2 ``.
//!   - a: `()` for every column (the last of each per key with `b`), or a
//!     dictionary of names to columns `` `c `` and aggregates `(max;`c)`,
//!     `(count;`i)`, `(wavg;`w;`x)`: `` `mx`n!((max;`price);(count;`i)) ``,
//!     `` (enlist`mx)!enlist(max;`price) ``.
//! - `count t`: the row count. `meta t`. `tables[]`, `tables`, `` tables` ``,
//!   `` tables`. ``.
//!
//! Literals: symbols `` `AAPL `` (the empty symbol `` ` ``), strings
//! `"abc"`, longs `5` `5j` `-5`, ints `5i`, floats `1.5` `1.5f` `1e3`,
//! booleans `1b` `0b`, timestamps `2024.01.02D09:30:00.123` (0 to 9
//! fraction digits), dates `2024.01.02` (midnight, compared as a
//! timestamp).
//!
//! How it maps: identifiers are always quoted (`"price"`), so q names that
//! are SQL keywords work; `first c`/`last c` become
//! `first("c" ORDER BY "time")`/`last(...)` on the table's time column;
//! `count c` counts rows as q does (nulls included); `w wavg x` becomes
//! tickdb's `vwap(x, w)`, i.e. sum(w*x)/sum(w) over rows where both are
//! non-null; `within` becomes `BETWEEN`; `by` becomes `GROUP BY` and
//! `ORDER BY` of the keys; `aj` becomes `ASOF JOIN ... MATCH_CONDITION
//! (t.time >= q.time) ON t.sym = q.sym`.
//!
//! Errors: anything outside the subset (assignments, other functions,
//! `exec`, `update`, `delete`, `xbar`, lambdas, `select[n]`, nested
//! selects, other literal types) is [`QsqlError::Nyi`] with the text; an
//! unknown table is [`QsqlError::UnknownTable`] (q's `'name`); malformed
//! text (unbalanced brackets, a bad literal, an unknown column, a name that
//! is not a q name) is [`QsqlError::Parse`] with the character offset.

mod functional;
mod lex;
mod lit;
mod plan;
mod select;

use lex::{bracket_args, check_brackets, lex, sym_offsets, Tok, Token};
use plan::{columns, ident, unknown_column, Name};

/// What the translator needs to know about tables.
pub trait Catalog {
    /// Column names of `table`, in order; None when there is no such table.
    fn columns(&self, table: &str) -> Option<Vec<String>>;
    /// The table's designated timestamp column ("time" by default); None
    /// when it has none (then `first`, `last` and `select by` are `Nyi`).
    fn time_column(&self, table: &str) -> Option<String>;
}

/// What the server should do for a q expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// Run this SQL; the first `keys` result columns are the key of a
    /// keyed table (q `select ... by ...`), 0 for a plain table.
    Sql { sql: String, keys: usize },
    /// A long atom: the row count of the table (`count t`).
    Count(String),
    /// `meta t`.
    Meta(String),
    /// `tables[]`.
    Tables,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QsqlError {
    /// Outside the subset: the server answers q's `'nyi` with the
    /// expression's text.
    #[error("nyi: {0}")]
    Nyi(String),
    /// A table the catalog does not know: the server answers `'<name>` as
    /// q does.
    #[error("{0}")]
    UnknownTable(String),
    /// Malformed within the subset: what, and at which character offset
    /// of the text (counting from 0, in the text as given).
    #[error("parse error at {at}: {why}")]
    Parse { at: usize, why: String },
}

/// The parsers' `Nyi`; `translate` fills in the text.
fn nyi() -> QsqlError {
    QsqlError::Nyi(String::new())
}

/// A name given as a symbol must be a q name to become a SQL identifier.
fn q_name(s: &str, at: usize) -> Result<Name, QsqlError> {
    let mut cs = s.chars();
    let ok = cs.next().is_some_and(|c| c.is_ascii_alphabetic())
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(Name {
            text: s.to_string(),
            at,
        })
    } else {
        Err(QsqlError::Parse {
            at,
            why: format!("not a q name: `{s}"),
        })
    }
}

/// Translates one q expression of the subset (see the module doc).
pub fn translate(text: &str, catalog: &dyn Catalog) -> Result<Query, QsqlError> {
    dispatch(text, catalog).map_err(|e| match e {
        QsqlError::Nyi(_) => QsqlError::Nyi(text.trim().to_string()),
        // Offsets are bytes inside; the error counts characters.
        QsqlError::Parse { at, why } => QsqlError::Parse {
            at: text.char_indices().take_while(|(i, _)| *i < at).count(),
            why,
        },
        e => e,
    })
}

fn dispatch(text: &str, cat: &dyn Catalog) -> Result<Query, QsqlError> {
    let toks = lex(text)?;
    check_brackets(&toks)?;
    let end = text.trim_end().len();
    let Some(first) = toks.first() else {
        return Err(QsqlError::Parse {
            at: 0,
            why: "empty expression".into(),
        });
    };
    let bracketed = matches!(toks.get(1).map(|t| &t.tok), Some(Tok::Open('[')));
    match &first.tok {
        Tok::Ident(s) => match s.as_str() {
            "select" => plan::plan(&select::parse(&toks, end)?, cat),
            "aj" if bracketed => aj(&toks, cat),
            "count" => Ok(Query::Count(table_arg(&toks, cat, false)?)),
            "meta" => Ok(Query::Meta(table_arg(&toks, cat, true)?)),
            "tables" => tables(&toks),
            _ => Err(nyi()),
        },
        Tok::Quest if bracketed => plan::plan(&functional::parse(&toks)?, cat),
        _ => Err(nyi()),
    }
}

/// The table of `count t` / `count[t]` / `meta t` (also `` meta`t ``: q's
/// meta takes a table's name; `` count`t `` is the count of a symbol, 1).
fn table_arg(toks: &[Token], cat: &dyn Catalog, by_name: bool) -> Result<String, QsqlError> {
    let arg = match bracket_args(toks, 1) {
        Some(args) => match args.as_slice() {
            [[t]] => t,
            _ => return Err(nyi()),
        },
        None => match toks {
            [_, t] => t,
            _ => return Err(nyi()),
        },
    };
    let name = match &arg.tok {
        Tok::Ident(s) => s.clone(),
        Tok::Syms(v) if by_name && v.len() == 1 => q_name(&v[0], arg.at)?.text,
        _ => return Err(nyi()),
    };
    columns(cat, &name)?;
    Ok(name)
}

/// `tables[]`, `tables`, `` tables` ``, `` tables`. `` (and those
/// arguments in brackets): the root namespace's tables.
fn tables(toks: &[Token]) -> Result<Query, QsqlError> {
    let root = |t: &Token| match &t.tok {
        Tok::Syms(v) => matches!(v.as_slice(), [s] if s.is_empty() || s == "."),
        _ => false,
    };
    let ok = match toks {
        [_] => true,
        [_, t] => root(t),
        _ => match bracket_args(toks, 1).as_deref() {
            Some([[]]) => true,
            Some([[t]]) => root(t),
            _ => false,
        },
    };
    if ok {
        Ok(Query::Tables)
    } else {
        Err(nyi())
    }
}

/// `aj[`c1`c2`time; t; q]`.
fn aj(toks: &[Token], cat: &dyn Catalog) -> Result<Query, QsqlError> {
    let args = bracket_args(toks, 1).ok_or_else(nyi)?;
    let [cols, t, q] = args.as_slice() else {
        return Err(nyi());
    };
    let join: Vec<Name> = match cols {
        [c] => match &c.tok {
            Tok::Syms(v) => sym_offsets(v, c.at)
                .map(|(s, at)| q_name(s, at))
                .collect::<Result<_, _>>()?,
            _ => return Err(nyi()),
        },
        _ => return Err(nyi()),
    };
    let table = |arg: &[Token]| -> Result<String, QsqlError> {
        match arg {
            [t] => match &t.tok {
                Tok::Ident(s) => Ok(s.clone()),
                Tok::Syms(v) if v.len() == 1 => Ok(q_name(&v[0], t.at)?.text),
                _ => Err(nyi()),
            },
            _ => Err(nyi()),
        }
    };
    let (t, q) = (table(t)?, table(q)?);
    let (tc, qc) = (columns(cat, &t)?, columns(cat, &q)?);
    let Some((time, eqs)) = join.split_last() else {
        return Err(nyi());
    };
    for c in &join {
        if !tc.contains(&c.text) || !qc.contains(&c.text) {
            return Err(unknown_column(c));
        }
    }
    // Aliases `l` and `r` are unquoted: the tables are quoted identifiers,
    // so no table name can clash with them, and a self-join works.
    let mut select: Vec<String> = tc.iter().map(|c| format!("l.{}", ident(c))).collect();
    select.extend(
        qc.iter()
            .filter(|c| !tc.contains(c))
            .map(|c| format!("r.{}", ident(c))),
    );
    let time = ident(&time.text);
    let mut sql = format!(
        "SELECT {} FROM {} l ASOF JOIN {} r MATCH_CONDITION (l.{time} >= r.{time})",
        select.join(", "),
        ident(&t),
        ident(&q)
    );
    if !eqs.is_empty() {
        let on: Vec<String> = eqs
            .iter()
            .map(|c| format!("l.{0} = r.{0}", ident(&c.text)))
            .collect();
        sql.push_str(" ON ");
        sql.push_str(&on.join(" AND "));
    }
    Ok(Query::Sql { sql, keys: 0 })
}
