//! Limits on the statement itself, checked before anything plans it: its
//! length and how deeply its expressions nest.
//!
//! Planning, optimizing and even dropping a syntax tree recurse once per
//! level of nesting, and `1+1+…+1` or `a=1 or a=1 or …` nest one level per
//! term. Without a bound, a 4 KB statement overflowed a thread's stack and
//! aborted the whole process (tickerplant included). So a statement is
//! refused with an error when it is longer than `QUERY_TEXT_BYTES_MAX` or
//! nests deeper than `EXPR_DEPTH_MAX`; what is accepted runs on the query
//! threads, whose stacks (`pool::QUERY_THREAD_STACK_BYTES`) hold that depth
//! with a wide margin, and DataFusion's own recursion guard (its
//! `recursive_protection` feature) grows the stack of deeper internal
//! passes instead of overflowing it.

use crate::QueryError;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{Expr, Query, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::Dialect;
use std::collections::VecDeque;
use std::ops::ControlFlow;

/// Longest statement accepted, in bytes.
pub const QUERY_TEXT_BYTES_MAX: usize = 1024 * 1024;
/// Deepest nesting of expressions (and subqueries) in one statement.
/// Long chains of `OR`, `AND`, `+` or `||` nest one level per term.
pub const EXPR_DEPTH_MAX: usize = 4096;

/// Refuses a statement text over `QUERY_TEXT_BYTES_MAX`.
pub fn check_text(sql: &str) -> Result<(), QueryError> {
    if sql.len() > QUERY_TEXT_BYTES_MAX {
        return Err(QueryError::TooComplex(format!(
            "statement is {} bytes, over the limit of {QUERY_TEXT_BYTES_MAX} bytes",
            sql.len()
        )));
    }
    Ok(())
}

/// Parses `sql` (one or more statements) with `dialect` and checks each
/// against the limits; the caller plans its own parse afterwards.
pub fn check_sql(sql: &str, dialect: &dyn Dialect) -> Result<(), QueryError> {
    check_text(sql)?;
    let statements = match DFParser::parse_sql_with_dialect(sql, dialect) {
        Ok(s) => s,
        // A statement that does not parse is reported by the caller's own
        // parse, with its position; nothing deep was built.
        Err(_) => return Ok(()),
    };
    check_statements(statements)
}

fn check_statements(statements: VecDeque<DfStatement>) -> Result<(), QueryError> {
    for s in &statements {
        check_depth(s)?;
    }
    Ok(())
}

/// Refuses a parsed statement nesting deeper than `EXPR_DEPTH_MAX`.
pub fn check_depth(statement: &DfStatement) -> Result<(), QueryError> {
    let mut v = DepthVisitor {
        depth: 0,
        deepest: 0,
    };
    let flow = match statement {
        DfStatement::Statement(s) => s.visit(&mut v),
        DfStatement::Explain(e) => return check_depth(&e.statement),
        // DDL and COPY are refused later as not read-only; they carry no
        // user expressions worth walking.
        _ => ControlFlow::Continue(()),
    };
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(QueryError::TooComplex(format!(
            "statement nests expressions more than {EXPR_DEPTH_MAX} levels deep \
             (long chains of OR, AND, + or || count one level per term); \
             use IN (...) lists or split the statement"
        ))),
    }
}

/// Counts the current nesting and stops the walk past the limit, so the
/// walk itself never recurses deeper than the limit.
struct DepthVisitor {
    depth: usize,
    deepest: usize,
}

impl DepthVisitor {
    fn enter(&mut self) -> ControlFlow<()> {
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
        if self.depth > EXPR_DEPTH_MAX {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self) -> ControlFlow<()> {
        self.depth = self.depth.saturating_sub(1);
        ControlFlow::Continue(())
    }
}

impl Visitor for DepthVisitor {
    type Break = ();

    fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.leave()
    }

    fn pre_visit_expr(&mut self, _e: &Expr) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_expr(&mut self, _e: &Expr) -> ControlFlow<()> {
        self.leave()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    fn chain(op: &str, terms: usize) -> String {
        let mut s = String::from("select 1 where ");
        for i in 0..terms {
            if i > 0 {
                s.push_str(op);
            }
            s.push_str("1=1");
        }
        s
    }

    /// Runs `f` with the stack the query threads have, as the engine does.
    fn on_query_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(crate::pool::QUERY_THREAD_STACK_BYTES)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn shallow_statements_pass() {
        on_query_stack(|| {
            check_sql("select 1+1+1", &GenericDialect {}).unwrap();
            check_sql(&chain(" or ", 1500), &GenericDialect {}).unwrap();
            // A syntax error is left to the caller's parse.
            check_sql("selec 1", &GenericDialect {}).unwrap();
        });
    }

    #[test]
    fn deep_chains_are_refused_with_a_clear_error() {
        on_query_stack(|| {
            let sql = chain(" or ", EXPR_DEPTH_MAX + 10);
            let e = check_sql(&sql, &GenericDialect {}).unwrap_err();
            assert!(matches!(e, QueryError::TooComplex(_)), "{e}");
            assert!(e.to_string().contains("levels deep"), "{e}");
            let plus = format!("select {}", vec!["1"; EXPR_DEPTH_MAX + 10].join("+"));
            assert!(check_sql(&plus, &GenericDialect {}).is_err());
            // The longest statement accepted, one term deeper per two bytes:
            // refused, and parsing and dropping it fits the stack.
            let longest = format!(
                "select {}",
                vec!["1"; QUERY_TEXT_BYTES_MAX / 2 - 8].join("+")
            );
            assert!(longest.len() <= QUERY_TEXT_BYTES_MAX);
            assert!(check_sql(&longest, &GenericDialect {}).is_err());
        });
    }

    #[test]
    fn long_text_is_refused_before_parsing() {
        let sql = format!("select '{}'", "a".repeat(QUERY_TEXT_BYTES_MAX));
        let e = check_sql(&sql, &GenericDialect {}).unwrap_err();
        assert!(e.to_string().contains("bytes, over the limit"), "{e}");
    }
}
