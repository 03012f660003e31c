//! `CREATE TABLE` and `ALTER TABLE ... ADD COLUMN` as SQL users write them,
//! turned into tickdb schema changes (`tickdb_core::schema_change`). The
//! engine only parses; the node's tp runs them (`DdlExec`), as an admin's
//! statement journaled in order with the data (docs/sql.md, "Schema
//! changes").
//!
//! PostgreSQL's syntax is taken, and QuestDB's designated-timestamp and
//! partitioning suffix (`CREATE TABLE t (...) TIMESTAMP(ts) PARTITION BY
//! DAY [WAL]`, partitioning being the history's, by date, it is accepted
//! and ignored). Types by their SQL, PostgreSQL and QuestDB names
//! (`schema_change::sql_type`). Unquoted names are folded to lower case,
//! as queries fold them.

use crate::error::{parse_position, QueryError};
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ColumnDef, Ident, ObjectName, ObjectNamePart, Statement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use futures::future::BoxFuture;
use tickdb_core::schema_change::{sql_type, NewColumn, SchemaOp, SQL_TYPES};

/// What a schema change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdlOutcome {
    /// The journal sequence of the change; None when nothing changed
    /// (`IF NOT EXISTS` of what exists).
    pub seq: Option<u64>,
    /// The command tag a PostgreSQL client gets (`CREATE TABLE`, `ALTER
    /// TABLE`).
    pub tag: &'static str,
}

/// Runs schema changes: the node's tp, which checks the user's role,
/// journals the change and publishes it.
pub trait DdlExec: Send + Sync {
    /// Runs `ops` (parsed from `sql`) as `user` (None on a node without
    /// users). Err names what was wrong; nothing is applied then.
    fn exec(
        &self,
        ops: Vec<SchemaOp>,
        sql: String,
        user: Option<String>,
    ) -> BoxFuture<'_, Result<DdlOutcome, QueryError>>;

    /// Waits (a bounded time) until this node's tables hold the change at
    /// `seq`, so a query right after the statement sees it.
    fn wait_applied(&self, seq: u64) -> BoxFuture<'_, ()>;
}

/// Whether `sql` starts with CREATE or ALTER (after blanks and comments):
/// the cheap test that keeps every other query off the DDL parser.
pub fn looks_like_ddl(sql: &str) -> bool {
    let mut s = sql.trim_start();
    loop {
        if let Some(rest) = s.strip_prefix("--") {
            s = rest
                .split_once('\n')
                .map(|x| x.1)
                .unwrap_or("")
                .trim_start();
        } else if let Some(rest) = s.strip_prefix("/*") {
            s = rest
                .split_once("*/")
                .map(|x| x.1)
                .unwrap_or("")
                .trim_start();
        } else {
            break;
        }
    }
    let word: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    word == "create" || word == "alter"
}

fn refuse(m: impl Into<String>) -> QueryError {
    QueryError::Ddl(m.into())
}

/// An identifier as tickdb names it: unquoted ones folded to lower case.
fn ident(id: &Ident) -> String {
    match id.quote_style {
        None => id.value.to_lowercase(),
        Some(_) => id.value.clone(),
    }
}

fn table_name(name: &ObjectName) -> Result<String, QueryError> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(id)] => Ok(ident(id)),
        [ObjectNamePart::Identifier(schema), ObjectNamePart::Identifier(id)]
            if ident(schema) == "public" =>
        {
            Ok(ident(id))
        }
        _ => Err(refuse(format!(
            "table name {name}: tickdb tables have one-part names (no schema or database)"
        ))),
    }
}

fn column(c: &ColumnDef, table: &str) -> Result<NewColumn, QueryError> {
    let name = ident(&c.name);
    let ty_text = c.data_type.to_string();
    let ty = sql_type(&ty_text).ok_or_else(|| {
        refuse(format!(
            "table '{table}' column '{name}': unknown column type {ty_text} (use one of: {SQL_TYPES})"
        ))
    })?;
    if let Some(o) = c.options.first() {
        return Err(refuse(format!(
            "table '{table}' column '{name}': column options ({o}) are not supported: every column may hold nulls, and has no default"
        )));
    }
    Ok(NewColumn { name, ty })
}

/// The schema changes a parsed statement asks for; None when it is not a
/// `CREATE TABLE` or `ALTER TABLE` (it runs as a query). `timestamp` is a
/// designated timestamp named by QuestDB's suffix.
pub fn from_statement(
    st: &Statement,
    timestamp: Option<String>,
) -> Result<Option<Vec<SchemaOp>>, QueryError> {
    match st {
        Statement::CreateTable(ct) => {
            let table = table_name(&ct.name)?;
            if ct.or_replace || ct.temporary || ct.external {
                return Err(refuse(format!(
                    "CREATE TABLE {table}: OR REPLACE, TEMPORARY and EXTERNAL are not supported"
                )));
            }
            if ct.query.is_some() || ct.like.is_some() || ct.clone.is_some() {
                return Err(refuse(format!(
                    "CREATE TABLE {table}: AS, LIKE and CLONE are not supported: list the columns"
                )));
            }
            if let Some(c) = ct.constraints.first() {
                return Err(refuse(format!(
                    "CREATE TABLE {table}: table constraints ({c}) are not supported: a table made at run time is an append table (keyed tables come from the schema file)"
                )));
            }
            let columns = ct
                .columns
                .iter()
                .map(|c| column(c, &table))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(vec![SchemaOp::CreateTable {
                table,
                columns,
                timestamp,
                if_not_exists: ct.if_not_exists,
            }]))
        }
        Statement::AlterTable(at) => {
            let table = table_name(&at.name)?;
            let mut ops = Vec::with_capacity(at.operations.len());
            for op in &at.operations {
                match op {
                    AlterTableOperation::AddColumn {
                        if_not_exists,
                        column_def,
                        column_position: None,
                        ..
                    } => ops.push(SchemaOp::AddColumn {
                        column: column(column_def, &table)?,
                        table: table.clone(),
                        if_not_exists: *if_not_exists,
                    }),
                    AlterTableOperation::AddColumn { .. } => {
                        return Err(refuse(format!(
                            "ALTER TABLE {table}: a column is always added at the end (FIRST and AFTER are not supported)"
                        )))
                    }
                    other => {
                        return Err(refuse(format!(
                            "ALTER TABLE {table}: only ADD COLUMN is supported at run time, not {other} (journaled records hold columns by position: see docs/sql.md)"
                        )))
                    }
                }
            }
            Ok(Some(ops))
        }
        _ => Ok(None),
    }
}

/// QuestDB's suffix after a `CREATE TABLE`'s column list: `TIMESTAMP(col)`,
/// `PARTITION BY unit`, `WAL` or `BYPASS WAL`, in that order, each
/// optional. Returns the statement without it and the timestamp column;
/// None when the text has no such suffix.
fn questdb_suffix(sql: &str) -> Option<(String, Option<String>)> {
    let body = sql.trim().trim_end_matches(';').trim_end();
    // The column list's closing parenthesis.
    let open = body.find('(')?;
    let mut depth = 0usize;
    let mut close = None;
    for (i, ch) in body[open..].char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    let tail = &body[close + 1..];
    if tail.trim().is_empty() {
        return None;
    }
    let words: Vec<String> = tail
        .replace(['(', ')'], " ")
        .split_whitespace()
        .map(|w| w.to_string())
        .collect();
    let mut i = 0;
    let mut timestamp = None;
    let lower = |i: usize| words.get(i).map(|w| w.to_ascii_lowercase());
    if lower(i).as_deref() == Some("timestamp") {
        let col = words.get(i + 1)?;
        timestamp = Some(
            match col.strip_prefix('"').and_then(|c| c.strip_suffix('"')) {
                Some(quoted) => quoted.to_string(),
                None => col.to_lowercase(),
            },
        );
        i += 2;
    }
    if lower(i).as_deref() == Some("partition") && lower(i + 1).as_deref() == Some("by") {
        words.get(i + 2)?;
        i += 3;
    }
    if lower(i).as_deref() == Some("bypass") && lower(i + 1).as_deref() == Some("wal") {
        i += 2;
    } else if lower(i).as_deref() == Some("wal") {
        i += 1;
    }
    (i == words.len()).then(|| (body[..=close].to_string(), timestamp))
}

/// Parses one statement; the schema changes it asks for, or None when it
/// is not a `CREATE TABLE` or `ALTER TABLE`.
pub fn parse(sql: &str) -> Result<Option<Vec<SchemaOp>>, QueryError> {
    let (text, timestamp) = questdb_suffix(sql).unwrap_or_else(|| (sql.to_string(), None));
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, &text).map_err(|e| {
        let message = e.to_string();
        QueryError::Syntax {
            position: parse_position(&message),
            message,
        }
    })?;
    match statements.as_slice() {
        [one] => from_statement(one, timestamp),
        _ => Err(refuse(
            "one statement at a time: send each CREATE TABLE or ALTER TABLE on its own",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_core::ColumnType;

    #[test]
    fn create_and_alter_parse() {
        let ops = parse("CREATE TABLE News (time TIMESTAMP, sym SYMBOL, headline VARCHAR, score DOUBLE, n BIGINT)")
            .unwrap()
            .unwrap();
        match &ops[0] {
            SchemaOp::CreateTable { table, columns, .. } => {
                assert_eq!(table, "news");
                let tys: Vec<ColumnType> = columns.iter().map(|c| c.ty).collect();
                assert_eq!(
                    tys,
                    [
                        ColumnType::Timestamp,
                        ColumnType::Symbol,
                        ColumnType::Str,
                        ColumnType::F64,
                        ColumnType::I64
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        let ops = parse("alter table trade add column venue symbol;")
            .unwrap()
            .unwrap();
        assert_eq!(
            ops,
            vec![SchemaOp::AddColumn {
                table: "trade".into(),
                column: NewColumn {
                    name: "venue".into(),
                    ty: ColumnType::Symbol
                },
                if_not_exists: false
            }]
        );
        assert_eq!(parse("SELECT 1").unwrap(), None);
    }

    #[test]
    fn questdb_suffix_names_the_timestamp() {
        let ops =
            parse("CREATE TABLE t (ts TIMESTAMP, x DOUBLE) TIMESTAMP(ts) PARTITION BY DAY WAL;")
                .unwrap()
                .unwrap();
        match &ops[0] {
            SchemaOp::CreateTable { timestamp, .. } => assert_eq!(timestamp.as_deref(), Some("ts")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_changes_say_why() {
        let e = parse("CREATE TABLE t (time TIMESTAMP, x DECIMAL(10,2))")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column 'x': unknown column type DECIMAL(10,2)"),
            "{e}"
        );
        let e = parse("ALTER TABLE trade DROP COLUMN size")
            .unwrap_err()
            .to_string();
        assert!(e.contains("only ADD COLUMN"), "{e}");
        let e = parse("CREATE TABLE t (time TIMESTAMP, x DOUBLE NOT NULL)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("column options"), "{e}");
    }

    #[test]
    fn only_create_and_alter_look_like_ddl() {
        assert!(looks_like_ddl("  -- c\n/* x */ CREATE TABLE t (a int)"));
        assert!(looks_like_ddl("alter table t add column x int"));
        assert!(!looks_like_ddl("SELECT * FROM t"));
        assert!(!looks_like_ddl("createx"));
    }
}
