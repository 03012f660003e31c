//! Schema changes at run time: `CREATE TABLE` and `ALTER TABLE ... ADD
//! COLUMN`, as operations on a `Schema`, and the rule every reader of the
//! journal checks a change against.
//!
//! Journal records hold a table's columns by position and type (`codec`),
//! so a change may only add: a new table, or new columns at the end of a
//! table. Then every record written before the change still means what it
//! meant: its batches hold a prefix of the table's columns now, and the
//! columns added after it read as nulls (`codec::decode_widened`). Nothing
//! else (a column dropped, renamed, moved or retyped, a kind or key
//! changed) is a run-time change; those need a new journal
//! (docs/journal.md, "Schema history").
//!
//! A change is validated completely here, on the tp, before anything is
//! journaled: a bad statement changes nothing anywhere.

use crate::domain::Domain;
use crate::error::{CoreError, Result};
use crate::schema::{
    valid_name, ColumnDef, ColumnType, Schema, TableDef, TableKind, COLUMNS_MAX, NAME_BYTES_MAX,
};
use crate::schema_diff::{diff, Difference, SchemaChange};

/// Most tables a schema may reach by `CREATE TABLE`; bounds the schema text
/// every subscriber receives and the journal's schema history keeps.
pub const TABLES_MAX: usize = 4096;

/// A column a statement adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewColumn {
    pub name: String,
    pub ty: ColumnType,
}

/// One schema change, as a statement asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaOp {
    /// `CREATE TABLE [IF NOT EXISTS] name (col type, ...)`: an append table
    /// whose designated timestamp is the column named `time` or `timestamp`
    /// (else its first timestamp column) and whose symbol index is its
    /// first symbol column.
    CreateTable {
        table: String,
        columns: Vec<NewColumn>,
        /// The designated timestamp, when the statement names it
        /// (QuestDB's `TIMESTAMP(col)`).
        timestamp: Option<String>,
        if_not_exists: bool,
    },
    /// `ALTER TABLE name ADD [COLUMN] [IF NOT EXISTS] col type`: a column at
    /// the end of the table; rows already there read as null in it.
    AddColumn {
        table: String,
        column: NewColumn,
        if_not_exists: bool,
    },
}

impl SchemaOp {
    /// Several statements in tickdb's words, `; `-separated (one DDL or one
    /// ILP auto-create may make several changes at once).
    pub fn describe_all(ops: &[SchemaOp]) -> String {
        ops.iter()
            .map(SchemaOp::describe)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The statement in tickdb's words (canonical, for logs and the journal).
    pub fn describe(&self) -> String {
        match self {
            SchemaOp::CreateTable { table, columns, .. } => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|c| format!("{} {}", c.name, c.ty.name()))
                    .collect();
                format!("CREATE TABLE {table} ({})", cols.join(", "))
            }
            SchemaOp::AddColumn { table, column, .. } => format!(
                "ALTER TABLE {table} ADD COLUMN {} {}",
                column.name,
                column.ty.name()
            ),
        }
    }
}

fn refuse(reason: String) -> CoreError {
    CoreError::SchemaChange(reason)
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(refuse(format!(
            "bad {what} name '{}': a name is 1-{NAME_BYTES_MAX} ASCII letters, digits or '_' and does not start with a digit",
            name.chars().take(NAME_BYTES_MAX).collect::<String>()
        )))
    }
}

/// The table `op` creates (checked against `schema`).
fn new_table(
    schema: &Schema,
    table: &str,
    columns: &[NewColumn],
    timestamp: Option<&str>,
) -> Result<TableDef> {
    check_name("table", table)?;
    if schema.table(table).is_some() {
        return Err(refuse(format!("table '{table}' already exists")));
    }
    if schema.tables.len() >= TABLES_MAX {
        return Err(refuse(format!(
            "the schema holds {} tables, the most it may (TABLES_MAX)",
            schema.tables.len()
        )));
    }
    if columns.is_empty() || columns.len() > COLUMNS_MAX {
        return Err(refuse(format!(
            "table '{table}' needs 1 to {COLUMNS_MAX} columns, not {}",
            columns.len()
        )));
    }
    let mut defs: Vec<ColumnDef> = Vec::with_capacity(columns.len());
    for c in columns {
        check_name("column", &c.name)?;
        if defs.iter().any(|d| d.name == c.name) {
            return Err(refuse(format!(
                "table '{table}': column '{}' is given twice",
                c.name
            )));
        }
        defs.push(ColumnDef {
            name: c.name.clone(),
            ty: c.ty,
            domain: Domain::Dram,
        });
    }
    let is_ts = |d: &&ColumnDef, name: &str| d.ty == ColumnType::Timestamp && d.name == name;
    if let Some(ts) = timestamp {
        if !defs.iter().any(|d| is_ts(&d, ts)) {
            return Err(refuse(format!(
                "table '{table}': the designated timestamp '{ts}' is not a timestamp column of the table"
            )));
        }
    }
    let time_column = defs
        .iter()
        .position(|d| timestamp.is_some_and(|ts| is_ts(&d, ts)))
        .or_else(|| defs.iter().position(|d| is_ts(&d, "time")))
        .or_else(|| defs.iter().position(|d| is_ts(&d, "timestamp")))
        .or_else(|| defs.iter().position(|d| d.ty == ColumnType::Timestamp))
        .ok_or_else(|| {
            refuse(format!(
                "table '{table}' needs a timestamp column (its designated timestamp: the one named \
                 'time' or 'timestamp', else the first timestamp column)"
            ))
        })?;
    let sym_column = defs.iter().position(|d| d.ty == ColumnType::Symbol);
    Ok(TableDef {
        name: table.to_string(),
        kind: TableKind::Append,
        columns: defs,
        time_column,
        sym_column,
    })
}

/// `schema` with `ops` applied in order, all or nothing. `Ok(None)` when
/// nothing changes (every op was `IF NOT EXISTS` of what exists). Err names
/// the first op that cannot be made and why; `schema` is never touched.
pub fn apply(schema: &Schema, ops: &[SchemaOp]) -> Result<Option<Schema>> {
    let mut next = schema.clone();
    let mut changed = false;
    for op in ops {
        match op {
            SchemaOp::CreateTable {
                table,
                columns,
                timestamp,
                if_not_exists,
            } => {
                if *if_not_exists && next.table(table).is_some() {
                    continue;
                }
                next.tables
                    .push(new_table(&next, table, columns, timestamp.as_deref())?);
                changed = true;
            }
            SchemaOp::AddColumn {
                table,
                column,
                if_not_exists,
            } => {
                let t = next
                    .tables
                    .iter_mut()
                    .find(|t| &t.name == table)
                    .ok_or_else(|| refuse(format!("no table '{table}' to add a column to")))?;
                check_name("column", &column.name)?;
                if t.column_index(&column.name).is_some() {
                    if *if_not_exists {
                        continue;
                    }
                    return Err(refuse(format!(
                        "table '{table}' already has a column '{}'",
                        column.name
                    )));
                }
                if t.columns.len() >= COLUMNS_MAX {
                    return Err(refuse(format!(
                        "table '{table}' has {} columns, the most a table may (COLUMNS_MAX)",
                        t.columns.len()
                    )));
                }
                // A table placed wholly in fsmem keeps its new column there.
                let domain = if t.columns.iter().all(|c| c.domain == Domain::Fsmem) {
                    Domain::Fsmem
                } else {
                    Domain::Dram
                };
                t.columns.push(ColumnDef {
                    name: column.name.clone(),
                    ty: column.ty,
                    domain,
                });
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    let text = next.to_toml();
    if text.len() > crate::schema::SCHEMA_FILE_BYTES_MAX {
        return Err(refuse(format!(
            "the schema would take {} bytes as text, over the bound of {} (SCHEMA_FILE_BYTES_MAX)",
            text.len(),
            crate::schema::SCHEMA_FILE_BYTES_MAX
        )));
    }
    Ok(Some(next))
}

/// Checks that `new` only adds to `old` what a run-time change may add:
/// tables, and columns at the end of a table. Returns what was added; Err
/// lists what else differs.
pub fn extension(old: &Schema, new: &Schema) -> std::result::Result<Vec<Difference>, String> {
    let d = match diff(old, new) {
        SchemaChange::Same => return Ok(Vec::new()),
        SchemaChange::Compatible(d) | SchemaChange::Incompatible(d) => d,
    };
    let bad: Vec<String> = d
        .iter()
        .filter(|x| match x {
            Difference::TableAdded { .. } => false,
            Difference::ColumnAdded {
                table, position, ..
            } => old.table(table).is_none_or(|t| *position < t.columns.len()),
            _ => true,
        })
        .map(|x| x.to_string())
        .collect();
    if bad.is_empty() {
        Ok(d)
    } else {
        Err(bad.join("; "))
    }
}

/// A type name as SQL and ILP users write it, mapped to tickdb's column
/// types (QuestDB's and PostgreSQL's names, and tickdb's own).
pub fn sql_type(name: &str) -> Option<ColumnType> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.split('(').next().unwrap_or("").trim().to_string();
    Some(match n.as_str() {
        "timestamp"
        | "timestamptz"
        | "timestamp with time zone"
        | "timestamp without time zone" => ColumnType::Timestamp,
        "symbol" | "sym" => ColumnType::Symbol,
        "double" | "double precision" | "float" | "float8" | "real" | "float4" | "f64" => {
            ColumnType::F64
        }
        "long" | "bigint" | "int8" | "i64" => ColumnType::I64,
        "int" | "integer" | "int4" | "i32" => ColumnType::I32,
        "boolean" | "bool" => ColumnType::Bool,
        "string" | "varchar" | "text" | "character varying" | "str" => ColumnType::Str,
        "binary" | "bytea" | "bytes" | "varbinary" | "blob" => ColumnType::Bytes,
        _ => return None,
    })
}

/// The type names `sql_type` takes, for error messages.
pub const SQL_TYPES: &str =
    "timestamp, symbol, double (float, real), long (bigint), int (integer), \
                             boolean, varchar (string, text), binary (bytea)";

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: ColumnType) -> NewColumn {
        NewColumn {
            name: name.into(),
            ty,
        }
    }

    #[test]
    fn to_toml_parses_back_to_the_same_schema() {
        let s = Schema::default_schema();
        let back = Schema::parse(&s.to_toml(), "rendered").unwrap();
        assert_eq!(diff(&s, &back), SchemaChange::Same);
        let mut placed = s.clone();
        placed
            .place(&["trade.price".into()], Domain::Fsmem)
            .unwrap();
        let back = Schema::parse(&placed.to_toml(), "rendered").unwrap();
        assert_eq!(
            back.table("trade").unwrap().columns[2].domain,
            Domain::Fsmem
        );
    }

    #[test]
    fn create_and_add_extend_the_schema() {
        let s = Schema::default_schema();
        let next = apply(
            &s,
            &[
                SchemaOp::CreateTable {
                    table: "news".into(),
                    columns: vec![
                        col("sym", ColumnType::Symbol),
                        col("timestamp", ColumnType::Timestamp),
                        col("headline", ColumnType::Str),
                    ],
                    timestamp: None,
                    if_not_exists: false,
                },
                SchemaOp::AddColumn {
                    table: "trade".into(),
                    column: col("venue", ColumnType::Symbol),
                    if_not_exists: false,
                },
            ],
        )
        .unwrap()
        .unwrap();
        let news = next.table("news").unwrap();
        assert_eq!((news.time_column, news.sym_column), (1, Some(0)));
        assert_eq!(next.table("trade").unwrap().columns[4].name, "venue");
        let added = extension(&s, &next).unwrap();
        assert_eq!(added.len(), 2, "{added:?}");
        // The reverse is not an extension: it drops what was added.
        assert!(extension(&next, &s).is_err());
        // Rendered and parsed again, it is the same schema.
        let back = Schema::parse(&next.to_toml(), "rendered").unwrap();
        assert_eq!(diff(&next, &back), SchemaChange::Same);
        // IF NOT EXISTS of what exists changes nothing.
        let again = apply(
            &next,
            &[SchemaOp::AddColumn {
                table: "trade".into(),
                column: col("venue", ColumnType::Symbol),
                if_not_exists: true,
            }],
        )
        .unwrap();
        assert!(again.is_none());
    }

    #[test]
    fn bad_changes_name_what_is_wrong() {
        let s = Schema::default_schema();
        let err = |ops: &[SchemaOp]| apply(&s, ops).unwrap_err().to_string();
        let e = err(&[SchemaOp::CreateTable {
            table: "trade".into(),
            columns: vec![col("time", ColumnType::Timestamp)],
            timestamp: None,
            if_not_exists: false,
        }]);
        assert_eq!(e, "table 'trade' already exists");
        let e = err(&[SchemaOp::AddColumn {
            table: "trade".into(),
            column: col("price", ColumnType::F64),
            if_not_exists: false,
        }]);
        assert_eq!(e, "table 'trade' already has a column 'price'");
        let e = err(&[SchemaOp::AddColumn {
            table: "nosuch".into(),
            column: col("x", ColumnType::F64),
            if_not_exists: false,
        }]);
        assert!(e.contains("no table 'nosuch'"), "{e}");
        let e = err(&[SchemaOp::CreateTable {
            table: "t".into(),
            columns: vec![col("x", ColumnType::F64)],
            timestamp: None,
            if_not_exists: false,
        }]);
        assert!(e.contains("needs a timestamp column"), "{e}");
        let e = err(&[SchemaOp::CreateTable {
            table: "t".into(),
            columns: vec![
                col("time", ColumnType::Timestamp),
                col("time", ColumnType::F64),
            ],
            timestamp: None,
            if_not_exists: false,
        }]);
        assert!(e.contains("column 'time' is given twice"), "{e}");
        let e = err(&[SchemaOp::AddColumn {
            table: "trade".into(),
            column: col("bad name", ColumnType::F64),
            if_not_exists: false,
        }]);
        assert!(e.contains("bad column name 'bad name'"), "{e}");
        // All or nothing: the second op fails, so the first is not kept.
        assert!(apply(
            &s,
            &[
                SchemaOp::AddColumn {
                    table: "trade".into(),
                    column: col("venue", ColumnType::Symbol),
                    if_not_exists: false,
                },
                SchemaOp::AddColumn {
                    table: "trade".into(),
                    column: col("venue", ColumnType::Symbol),
                    if_not_exists: false,
                },
            ],
        )
        .is_err());
    }

    #[test]
    fn sql_type_names() {
        assert_eq!(sql_type("DOUBLE"), Some(ColumnType::F64));
        assert_eq!(sql_type("varchar(20)"), Some(ColumnType::Str));
        assert_eq!(sql_type("BIGINT"), Some(ColumnType::I64));
        assert_eq!(sql_type("SYMBOL"), Some(ColumnType::Symbol));
        assert_eq!(sql_type("decimal(10,2)"), None);
    }
}
