//! The query crate's error: what went wrong, in words a SQL user can act
//! on, with the position in the statement where the parser or planner knows
//! it, and a `kind` the HTTP and pgwire fronts map to their codes.

use datafusion::common::{DataFusionError, SchemaError};
use datafusion::sql::sqlparser::parser::ParserError;
use std::time::Duration;

/// A position in the SQL text: 1-based line and column.
pub type Position = (u64, u64);

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The text is not valid SQL.
    #[error("syntax error: {message}")]
    Syntax {
        message: String,
        position: Option<Position>,
    },
    /// Valid SQL that cannot be planned: unknown table or column, wrong
    /// types, unsupported constructs.
    #[error("{message}")]
    Plan {
        message: String,
        position: Option<Position>,
    },
    /// The query ran longer than its time limit and was cancelled.
    #[error("query timed out after {0:?}")]
    Timeout(Duration),
    /// The query needed more memory than its limit allows.
    #[error("query ran out of memory: {0}")]
    ResourcesExhausted(String),
    /// The statement is longer or nests deeper than the node accepts.
    #[error("statement too complex: {0}")]
    TooComplex(String),
    /// Every query slot and the whole waiting queue are taken.
    #[error("busy: {0}")]
    Busy(String),
    /// The node cannot answer yet: its tables are still being loaded
    /// (journal replay, Hot Restart reload, catch-up with the tp).
    #[error("not ready: {0}")]
    NotReady(String),
    /// A client cancelled the query.
    #[error("query cancelled")]
    Cancelled,
    /// The query failed while running (e.g. a cast of bad data).
    #[error("execution error: {0}")]
    Execution(String),
    /// A bug in tickdb or DataFusion.
    #[error("internal error: {0}")]
    Internal(String),
    /// A schema change (`CREATE TABLE`, `ALTER TABLE`) that cannot be
    /// made, or this node cannot make: the message names what was wrong.
    /// Nothing was applied.
    #[error("schema change refused: {0}")]
    Ddl(String),
    /// The user lacks the role the statement needs (`admin` for a schema
    /// change). Nothing was applied.
    #[error("permission denied: {0}")]
    Forbidden(String),
}

impl QueryError {
    /// A stable name for the error class: `syntax`, `plan`, `timeout`,
    /// `resources_exhausted`, `too_complex`, `busy`, `not_ready`,
    /// `cancelled`, `execution`, `internal`, `ddl`, `forbidden`.
    pub fn kind(&self) -> &'static str {
        match self {
            QueryError::Syntax { .. } => "syntax",
            QueryError::Plan { .. } => "plan",
            QueryError::Timeout(_) => "timeout",
            QueryError::ResourcesExhausted(_) => "resources_exhausted",
            QueryError::TooComplex(_) => "too_complex",
            QueryError::Busy(_) => "busy",
            QueryError::NotReady(_) => "not_ready",
            QueryError::Cancelled => "cancelled",
            QueryError::Execution(_) => "execution",
            QueryError::Internal(_) => "internal",
            QueryError::Ddl(_) => "ddl",
            QueryError::Forbidden(_) => "forbidden",
        }
    }

    /// The HTTP status that fits the error class.
    pub fn http_status(&self) -> u16 {
        match self {
            QueryError::Syntax { .. } | QueryError::Plan { .. } => 400,
            QueryError::Timeout(_) => 408,
            QueryError::ResourcesExhausted(_) => 413,
            QueryError::TooComplex(_) => 400,
            QueryError::Busy(_) | QueryError::NotReady(_) => 503,
            // nginx's "client closed request": only logs ever show it.
            QueryError::Cancelled => 499,
            QueryError::Execution(_) => 422,
            QueryError::Internal(_) => 500,
            QueryError::Ddl(_) => 400,
            QueryError::Forbidden(_) => 403,
        }
    }

    /// Where in the SQL text the error is, if known.
    pub fn position(&self) -> Option<Position> {
        match self {
            QueryError::Syntax { position, .. } | QueryError::Plan { position, .. } => *position,
            _ => None,
        }
    }

    /// The message without the class prefix.
    pub fn message(&self) -> String {
        match self {
            QueryError::Syntax { message, .. } | QueryError::Plan { message, .. } => {
                message.clone()
            }
            QueryError::Timeout(d) => format!("query timed out after {d:?}"),
            QueryError::Cancelled => "query cancelled".to_string(),
            QueryError::TooComplex(m) | QueryError::Busy(m) | QueryError::NotReady(m) => m.clone(),
            QueryError::ResourcesExhausted(m)
            | QueryError::Execution(m)
            | QueryError::Internal(m)
            | QueryError::Ddl(m)
            | QueryError::Forbidden(m) => m.clone(),
        }
    }
}

/// Finds "Line: L, Column: C" in a sqlparser message.
pub(crate) fn parse_position(msg: &str) -> Option<Position> {
    let at = msg.rfind("Line: ")?;
    let rest = &msg[at + "Line: ".len()..];
    let (line, rest) = rest.split_once(',')?;
    let rest = rest.trim_start().strip_prefix("Column: ")?;
    let col: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((line.trim().parse().ok()?, col.parse().ok()?))
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at Line: ") {
        Some(at) if parse_position(msg).is_some() => msg[..at].to_string(),
        _ => msg.to_string(),
    }
}

/// The last part of a possibly qualified table name.
fn table_part(r: &datafusion::common::TableReference) -> String {
    r.table().to_string()
}

fn field_not_found(
    field: &datafusion::common::Column,
    valid: &[datafusion::common::Column],
) -> String {
    let mut tables: Vec<String> = Vec::new();
    if let Some(r) = &field.relation {
        tables.push(table_part(r));
    } else {
        for v in valid {
            if let Some(r) = &v.relation {
                let t = table_part(r);
                if !tables.contains(&t) {
                    tables.push(t);
                }
            }
        }
    }
    let mut msg = format!("column '{}' not found", field.name);
    if !tables.is_empty() {
        let list: Vec<String> = tables.iter().map(|t| format!("'{t}'")).collect();
        msg.push_str(&format!(" in {}", list.join(", ")));
    }
    // Suggest the closest valid name, as DataFusion does.
    let lower = field.name.to_lowercase();
    let best = valid
        .iter()
        .map(|v| (levenshtein(&lower, &v.name.to_lowercase()), v))
        .min_by_key(|(d, _)| *d);
    if let Some((d, v)) = best {
        if d <= 2.max(lower.len() / 3) {
            msg.push_str(&format!("; did you mean '{}'?", v.name));
        }
    }
    if !valid.is_empty() {
        let mut names: Vec<&str> = valid.iter().map(|v| v.name.as_str()).collect();
        names.dedup();
        msg.push_str(&format!(" (columns: {})", names.join(", ")));
    }
    msg
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A history (Parquet) file that could not be read, named as the operator
/// knows it. DataFusion names files by object-store location, which drops
/// the leading `/` of an absolute path, and wraps the cause in repeated
/// "Parquet error:" prefixes.
fn history_file_error(msg: &str) -> Option<String> {
    const MARK: &str = "Failed to fetch metadata for file ";
    let at = msg.find(MARK)? + MARK.len();
    let rest = &msg[at..];
    let (path, cause) = rest.split_once(": ").unwrap_or((rest, ""));
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let mut cause = cause.trim();
    while let Some(c) = cause
        .strip_prefix("Parquet error: ")
        .or_else(|| cause.strip_prefix("Object Store error: "))
    {
        cause = c.trim_start();
    }
    Some(format!(
        "cannot read history file {path}: {cause} (tickdb hdb verify checks every file)"
    ))
}

/// Strips DataFusion's "Error during planning: " style prefixes.
fn clean(msg: &str) -> String {
    if let Some(m) = history_file_error(msg) {
        return m;
    }
    let mut m = msg.trim();
    for p in [
        "Error during planning: ",
        "Execution error: ",
        "Internal error: ",
        "This feature is not implemented: ",
        "Schema error: ",
        "Resources exhausted: ",
        "Arrow error: ",
        "Invalid or Unsupported Configuration: ",
        "type_coercion\ncaused by\n",
    ] {
        if let Some(rest) = m.strip_prefix(p) {
            m = rest.trim_start();
        }
    }
    // Backtraces are not for SQL users.
    match m.find("\n\nbacktrace:") {
        Some(at) => m[..at].to_string(),
        None => m.to_string(),
    }
}

/// Completes an error with what only the SQL text tells: a syntax error at
/// the end of the input ("found: EOF") points just past the last character.
pub(crate) fn with_sql(e: QueryError, sql: &str) -> QueryError {
    match e {
        QueryError::Syntax {
            message,
            position: None,
        } if message.contains("EOF") => {
            let line = sql.lines().count().max(1) as u64;
            let col = sql.lines().last().map(|l| l.chars().count()).unwrap_or(0) as u64 + 1;
            QueryError::Syntax {
                message,
                position: Some((line, col)),
            }
        }
        e => e,
    }
}

pub(crate) fn from_df(e: DataFusionError) -> QueryError {
    convert(e, None)
}

fn convert(e: DataFusionError, diag: Option<(String, Option<Position>)>) -> QueryError {
    match e {
        DataFusionError::Diagnostic(d, inner) => {
            let pos = d.span.as_ref().map(|s| (s.start.line, s.start.column));
            // The innermost diagnostic is the most specific; keep the first
            // one found walking in only if nothing deeper replaces it.
            convert(*inner, Some((d.message.clone(), pos)))
        }
        DataFusionError::Context(_, inner) => convert(*inner, diag),
        DataFusionError::Shared(inner) => convert(
            // Shared errors are immutable; rebuild a message-only copy.
            DataFusionError::Execution(clean(&inner.to_string())),
            diag,
        )
        .reclassify(&inner),
        DataFusionError::Collection(mut v) if !v.is_empty() => convert(v.remove(0), diag),
        DataFusionError::External(b) => match b.downcast::<DataFusionError>() {
            Ok(inner) => convert(*inner, diag),
            Err(b) => QueryError::Execution(b.to_string()),
        },
        DataFusionError::ArrowError(a, _) => match *a {
            datafusion::arrow::error::ArrowError::ExternalError(b) => {
                match b.downcast::<DataFusionError>() {
                    Ok(inner) => convert(*inner, diag),
                    Err(b) => QueryError::Execution(b.to_string()),
                }
            }
            other => QueryError::Execution(other.to_string()),
        },
        DataFusionError::SQL(p, _) => {
            let msg = match p.as_ref() {
                ParserError::TokenizerError(s) | ParserError::ParserError(s) => s.clone(),
                ParserError::RecursionLimitExceeded => "statement nests too deeply".to_string(),
            };
            QueryError::Syntax {
                position: parse_position(&msg).or(diag.and_then(|d| d.1)),
                message: strip_position(&msg),
            }
        }
        DataFusionError::SchemaError(s, _) => {
            let pos = diag.as_ref().and_then(|d| d.1);
            let message = match s.as_ref() {
                SchemaError::FieldNotFound {
                    field,
                    valid_fields,
                } => field_not_found(field, valid_fields),
                other => clean(&other.to_string()),
            };
            QueryError::Plan {
                message,
                position: pos,
            }
        }
        DataFusionError::Plan(m) | DataFusionError::Configuration(m) => plan_with(diag, clean(&m)),
        DataFusionError::NotImplemented(m) => {
            plan_with(diag, format!("not supported: {}", clean(&m)))
        }
        DataFusionError::ResourcesExhausted(m) => QueryError::ResourcesExhausted(clean(&m)),
        DataFusionError::Execution(m) => {
            if m.contains("Resources exhausted") {
                QueryError::ResourcesExhausted(clean(&m))
            } else {
                QueryError::Execution(clean(&m))
            }
        }
        DataFusionError::ExecutionJoin(j) => QueryError::Internal(format!("task failed: {j}")),
        DataFusionError::Internal(m) => QueryError::Internal(clean(&m)),
        other => QueryError::Execution(clean(&other.to_string())),
    }
}

fn plan_with(diag: Option<(String, Option<Position>)>, message: String) -> QueryError {
    match diag {
        // "table 'trad' not found" reads better than the planner's
        // fully qualified "table 'datafusion.public.trad' not found".
        Some((m, pos)) => QueryError::Plan {
            message: m,
            position: pos,
        },
        None => QueryError::Plan {
            message,
            position: None,
        },
    }
}

impl QueryError {
    /// Restores the class of a shared error flattened to a message.
    fn reclassify(self, original: &DataFusionError) -> QueryError {
        match (self, original.find_root()) {
            (QueryError::Execution(m), DataFusionError::ResourcesExhausted(_)) => {
                QueryError::ResourcesExhausted(m)
            }
            (QueryError::Execution(m), DataFusionError::Internal(_)) => QueryError::Internal(m),
            (e, _) => e,
        }
    }
}

impl From<DataFusionError> for QueryError {
    fn from(e: DataFusionError) -> Self {
        from_df(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_file_is_named_by_its_absolute_path() {
        let m = clean("Parquet error: Parquet error: Failed to fetch metadata for file tmp/h/trade/date=2026-11-18/part-00000.parquet: Parquet error: Corrupt footer");
        assert_eq!(m, "cannot read history file /tmp/h/trade/date=2026-11-18/part-00000.parquet: Corrupt footer (tickdb hdb verify checks every file)");
    }

    #[test]
    fn positions_parse() {
        assert_eq!(
            parse_position("Expected: an SQL statement, found: SELEC at Line: 1, Column: 8"),
            Some((1, 8))
        );
        assert_eq!(parse_position("no position"), None);
        assert_eq!(strip_position("bad at Line: 2, Column: 3"), "bad");
    }

    #[test]
    fn distance() {
        assert_eq!(levenshtein("prce", "price"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
    }
}
