//! Table definitions, read from a TOML schema file (see `docs/schema.md`).
//!
//! A table is either an append table (every update adds rows) or a keyed
//! table (a primary key maps to the latest row; an update upserts). Each
//! column has a type and a memory domain; the domain defaults to the
//! table's, which defaults to `dram`.

use crate::domain::Domain;
use crate::error::{CoreError, Result};
use crate::schema_file;
use serde::Deserialize;
use std::collections::HashSet;
use toml::Spanned;

pub use crate::schema_file::SCHEMA_FILE_BYTES_MAX;

/// The schema `tickdb` uses when no `--schema` file is given: kdb+ tick's
/// `trade` and `quote` tables, and the aggregation engine's keyed
/// `trade_1m`, `quote_1m` and `daily`.
pub const DEFAULT_SCHEMA_TOML: &str = include_str!("default_schema.toml");

/// Longest table or column name accepted; names travel in every journal record.
pub const NAME_BYTES_MAX: usize = 128;
/// Most columns in one table; bounds per-row work and the codec's column count.
pub const COLUMNS_MAX: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// Nanoseconds since the Unix epoch, UTC.
    Timestamp,
    /// An interned string: a per-table dictionary id in memory.
    Symbol,
    F64,
    I64,
    I32,
    Bool,
    Str,
    Bytes,
}

impl ColumnType {
    pub fn parse(s: &str) -> Option<ColumnType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "timestamp" | "time" => ColumnType::Timestamp,
            "symbol" | "sym" => ColumnType::Symbol,
            "f64" | "float" | "double" => ColumnType::F64,
            "i64" | "long" => ColumnType::I64,
            "i32" | "int" => ColumnType::I32,
            "bool" | "boolean" => ColumnType::Bool,
            "string" | "str" | "varchar" => ColumnType::Str,
            "bytes" | "binary" => ColumnType::Bytes,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Timestamp => "timestamp",
            ColumnType::Symbol => "symbol",
            ColumnType::F64 => "f64",
            ColumnType::I64 => "i64",
            ColumnType::I32 => "i32",
            ColumnType::Bool => "bool",
            ColumnType::Str => "string",
            ColumnType::Bytes => "bytes",
        }
    }

    /// The one-byte tag the codec writes for this type.
    pub fn tag(self) -> u8 {
        match self {
            ColumnType::Timestamp => 1,
            ColumnType::Symbol => 2,
            ColumnType::F64 => 3,
            ColumnType::I64 => 4,
            ColumnType::I32 => 5,
            ColumnType::Bool => 6,
            ColumnType::Str => 7,
            ColumnType::Bytes => 8,
        }
    }

    pub fn from_tag(tag: u8) -> Option<ColumnType> {
        Some(match tag {
            1 => ColumnType::Timestamp,
            2 => ColumnType::Symbol,
            3 => ColumnType::F64,
            4 => ColumnType::I64,
            5 => ColumnType::I32,
            6 => ColumnType::Bool,
            7 => ColumnType::Str,
            8 => ColumnType::Bytes,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    Append,
    /// Column indexes of the primary key, in key order.
    Keyed {
        key: Vec<usize>,
    },
}

#[derive(Debug, Clone)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
    pub domain: Domain,
}

#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub kind: TableKind,
    pub columns: Vec<ColumnDef>,
    /// Index of the designated timestamp column: the one an ILP line's
    /// trailing timestamp fills, and the one chunks keep min/max of.
    pub time_column: usize,
    /// Index of the symbol column the per-table symbol index is built on.
    pub sym_column: Option<usize>,
}

impl TableDef {
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

#[derive(Debug, Clone)]
pub struct Schema {
    pub tables: Vec<TableDef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaFile {
    #[serde(default)]
    table: Vec<Spanned<TableFile>>,
}

// Every string is `Spanned`, so that a problem with it is reported by line
// and column rather than by quoting it (see `schema_file`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    name: Spanned<String>,
    #[serde(default)]
    kind: Option<Spanned<String>>,
    #[serde(default)]
    key: Vec<Spanned<String>>,
    #[serde(default)]
    timestamp: Option<Spanned<String>>,
    #[serde(default)]
    index: Option<Spanned<String>>,
    #[serde(default)]
    domain: Option<Spanned<String>>,
    column: Spanned<Vec<ColumnFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ColumnFile {
    name: Spanned<String>,
    #[serde(rename = "type")]
    ty: Spanned<String>,
    #[serde(default)]
    domain: Option<Spanned<String>>,
}

/// Whether `name` may name a table or a column: 1 to `NAME_BYTES_MAX` ASCII
/// letters, digits or `_`, not starting with a digit.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// `'name'` for a valid identifier; anything else from the file is never
/// repeated in an error (see `schema_file`), the line and column say where.
fn ident(name: &str) -> String {
    if valid_name(name) {
        format!("'{name}'")
    } else {
        "(not a valid name)".to_string()
    }
}

impl Schema {
    /// The built-in schema: `trade`, `quote` and the agg's tables.
    pub fn default_schema() -> Schema {
        // The embedded text is part of the binary and covered by a unit test,
        // so failing to parse it is a build defect, not an input error.
        Schema::parse(DEFAULT_SCHEMA_TOML, "<built-in>").expect("built-in schema parses")
    }

    /// Reads and parses a schema file (`--schema FILE`); returns the schema
    /// and its text (which subscribers and the journal's schema history
    /// keep). Only a regular file of at most `SCHEMA_FILE_BYTES_MAX` bytes is
    /// read, and no error quotes the file's contents (see `schema_file`).
    pub fn load(path: &std::path::Path) -> Result<(Schema, String)> {
        let text = crate::schema_file::read_schema_file(path)?;
        let schema = Schema::parse(&text, &path.display().to_string())?;
        Ok((schema, text))
    }

    /// Parses schema text; `origin` names where it came from in errors (a
    /// file, "schema from tp HOST:PORT", the journal's schema history).
    pub fn parse(text: &str, origin: &str) -> Result<Schema> {
        let err = |reason: String| CoreError::Schema {
            path: origin.to_string(),
            reason,
        };
        let err_at = |span: std::ops::Range<usize>, reason: String| {
            err(format!("{}{reason}", schema_file::at(text, Some(span))))
        };
        // Syntax first, on its own: the parser's messages never quote the
        // input, the structural pass's (serde's) do and are rewritten.
        toml::from_str::<toml::Table>(text)
            .map_err(|e| err(schema_file::syntax_error(text, &e)))?;
        let file: SchemaFile =
            toml::from_str(text).map_err(|e| err(schema_file::structure_error(text, &e)))?;
        let mut tables = Vec::new();
        let mut names = HashSet::new();
        for t in file.table {
            let t_span = t.span();
            let t = t.into_inner();
            let tname = t.name.get_ref().clone();
            if !valid_name(&tname) {
                return Err(err_at(
                    t.name.span(),
                    format!(
                        "bad table name: it must be 1-{NAME_BYTES_MAX} ASCII letters, digits or '_' and not start with a digit"
                    ),
                ));
            }
            if !names.insert(tname.clone()) {
                return Err(err_at(
                    t.name.span(),
                    format!("table '{tname}' is defined twice"),
                ));
            }
            let table_domain = match &t.domain {
                Some(d) => Domain::parse(d.get_ref()).ok_or_else(|| {
                    err_at(
                        d.span(),
                        format!("table '{tname}': unknown domain (dram or fsmem)"),
                    )
                })?,
                None => Domain::Dram,
            };
            let cols = t.column.get_ref();
            if cols.is_empty() || cols.len() > COLUMNS_MAX {
                return Err(err_at(
                    t.column.span(),
                    format!("table '{tname}' needs 1 to {COLUMNS_MAX} columns"),
                ));
            }
            let mut columns = Vec::new();
            let mut col_names = HashSet::new();
            for c in cols {
                let cname = c.name.get_ref();
                if !valid_name(cname) {
                    return Err(err_at(
                        c.name.span(),
                        format!(
                            "table '{tname}': bad column name: it must be 1-{NAME_BYTES_MAX} ASCII letters, digits or '_' and not start with a digit"
                        ),
                    ));
                }
                if !col_names.insert(cname.clone()) {
                    return Err(err_at(
                        c.name.span(),
                        format!("table '{tname}': column '{cname}' is defined twice"),
                    ));
                }
                let ty = ColumnType::parse(c.ty.get_ref()).ok_or_else(|| {
                    err_at(
                        c.ty.span(),
                        format!(
                            "table '{tname}' column '{cname}': unknown column type (timestamp, symbol, f64, i64, i32, bool, string, bytes)"
                        ),
                    )
                })?;
                let domain = match &c.domain {
                    Some(d) => Domain::parse(d.get_ref()).ok_or_else(|| {
                        err_at(
                            d.span(),
                            format!(
                                "table '{tname}' column '{cname}': unknown domain (dram or fsmem)"
                            ),
                        )
                    })?,
                    None => table_domain,
                };
                columns.push(ColumnDef {
                    name: cname.clone(),
                    ty,
                    domain,
                });
            }
            let (ts_name, ts_span) = match &t.timestamp {
                Some(ts) => (ts.get_ref().clone(), ts.span()),
                None => ("time".to_string(), t_span.clone()),
            };
            let time_column = columns
                .iter()
                .position(|c| c.name == ts_name && c.ty == ColumnType::Timestamp)
                .ok_or_else(|| {
                    err_at(
                        ts_span,
                        format!(
                            "table '{tname}' needs a timestamp column named {} (set `timestamp = \"...\"` to use another)",
                            ident(&ts_name)
                        ),
                    )
                })?;
            let sym_column = match &t.index {
                Some(ix) => Some(
                    columns
                        .iter()
                        .position(|c| &c.name == ix.get_ref() && c.ty == ColumnType::Symbol)
                        .ok_or_else(|| {
                            err_at(
                                ix.span(),
                                format!(
                                    "table '{tname}': index column {} must be a symbol column",
                                    ident(ix.get_ref())
                                ),
                            )
                        })?,
                ),
                None => columns.iter().position(|c| c.ty == ColumnType::Symbol),
            };
            let kind_span = t.kind.as_ref().map(|k| k.span()).unwrap_or(t_span.clone());
            let kind = match t
                .kind
                .as_ref()
                .map(|k| k.get_ref().as_str())
                .unwrap_or("append")
            {
                "append" => {
                    if let Some(k) = t.key.first() {
                        return Err(err_at(
                            k.span(),
                            format!("table '{tname}': `key` is only for keyed tables"),
                        ));
                    }
                    TableKind::Append
                }
                "keyed" => {
                    if t.key.is_empty() {
                        return Err(err_at(
                            kind_span,
                            format!("keyed table '{tname}' needs `key = [\"col\", ...]`"),
                        ));
                    }
                    let mut key = Vec::new();
                    for k in &t.key {
                        let i = columns
                            .iter()
                            .position(|c| &c.name == k.get_ref())
                            .ok_or_else(|| {
                                err_at(
                                    k.span(),
                                    format!(
                                        "table '{tname}': key column {} is not defined",
                                        ident(k.get_ref())
                                    ),
                                )
                            })?;
                        if matches!(columns[i].ty, ColumnType::F64) {
                            return Err(err_at(
                                k.span(),
                                format!(
                                    "table '{tname}': key column '{}' cannot be f64",
                                    columns[i].name
                                ),
                            ));
                        }
                        key.push(i);
                    }
                    TableKind::Keyed { key }
                }
                _ => {
                    return Err(err_at(
                        kind_span,
                        format!("table '{tname}': kind must be append or keyed"),
                    ))
                }
            };
            tables.push(TableDef {
                name: tname,
                kind,
                columns,
                time_column,
                sym_column,
            });
        }
        if tables.is_empty() {
            return Err(err("no [[table]] defined".to_string()));
        }
        Ok(Schema { tables })
    }

    /// The schema as a TOML schema file that parses back to the same
    /// schema (`Schema::parse`), domains included: what a run-time schema
    /// change records in the journal and sends to subscribers. Names are
    /// valid identifiers (checked when the schema was made), so they need
    /// no escaping.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for t in &self.tables {
            let _ = writeln!(out, "[[table]]\nname = \"{}\"", t.name);
            if let TableKind::Keyed { key } = &t.kind {
                let names: Vec<String> = key
                    .iter()
                    .map(|i| format!("\"{}\"", t.columns[*i].name))
                    .collect();
                let _ = writeln!(out, "kind = \"keyed\"\nkey = [{}]", names.join(", "));
            }
            let _ = writeln!(out, "timestamp = \"{}\"", t.columns[t.time_column].name);
            if let Some(i) = t.sym_column {
                let _ = writeln!(out, "index = \"{}\"", t.columns[i].name);
            }
            out.push_str("column = [\n");
            for c in &t.columns {
                let _ = writeln!(
                    out,
                    "  {{ name = \"{}\", type = \"{}\", domain = \"{}\" }},",
                    c.name,
                    c.ty.name(),
                    c.domain.name()
                );
            }
            out.push_str("]\n\n");
        }
        out
    }

    pub fn table(&self, name: &str) -> Option<&TableDef> {
        self.tables.iter().find(|t| t.name == name)
    }

    pub fn table_index(&self, name: &str) -> Option<usize> {
        self.tables.iter().position(|t| t.name == name)
    }

    /// Moves tables or single columns into a memory domain, the way kdb+
    /// moves objects into `.m`. Each spec is `TABLE` or `TABLE.COLUMN`.
    pub fn place(&mut self, specs: &[String], domain: Domain) -> Result<()> {
        for spec in specs {
            let (t, c) = match spec.split_once('.') {
                Some((t, c)) => (t, Some(c)),
                None => (spec.as_str(), None),
            };
            let table = self
                .tables
                .iter_mut()
                .find(|x| x.name == t)
                .ok_or_else(|| CoreError::UnknownTable(t.to_string()))?;
            match c {
                None => table.columns.iter_mut().for_each(|col| col.domain = domain),
                Some(c) => {
                    let col = table
                        .columns
                        .iter_mut()
                        .find(|x| x.name == c)
                        .ok_or_else(|| CoreError::UnknownColumn {
                            table: t.to_string(),
                            column: c.to_string(),
                        })?;
                    col.domain = domain;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schema_has_trade_and_quote() {
        let s = Schema::default_schema();
        let trade = s.table("trade").unwrap();
        let names: Vec<_> = trade.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["time", "sym", "price", "size"]);
        assert_eq!(trade.sym_column, Some(1));
        let quote = s.table("quote").unwrap();
        let names: Vec<_> = quote.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["time", "sym", "bid", "ask", "bsize", "asize"]);
        // The aggregation engine's keyed tables (tickdb agg).
        let t1m = s.table("trade_1m").unwrap();
        assert_eq!(t1m.kind, TableKind::Keyed { key: vec![1, 0] });
        assert_eq!(t1m.time_column, 0);
        let q1m = s.table("quote_1m").unwrap();
        assert_eq!(q1m.kind, TableKind::Keyed { key: vec![1, 0] });
        let daily = s.table("daily").unwrap();
        assert_eq!(daily.kind, TableKind::Keyed { key: vec![1] });
        let names: Vec<_> = s.tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["trade", "quote", "trade_1m", "quote_1m", "daily"]);
    }

    #[test]
    fn keyed_table_and_domains() {
        let s = Schema::parse(
            r#"
            [[table]]
            name = "cache"
            kind = "keyed"
            key = ["key"]
            domain = "fsmem"
            column = [
              { name = "time", type = "timestamp" },
              { name = "key", type = "string" },
              { name = "value", type = "bytes", domain = "dram" },
            ]
            "#,
            "t",
        )
        .unwrap();
        let t = s.table("cache").unwrap();
        assert_eq!(t.kind, TableKind::Keyed { key: vec![1] });
        assert_eq!(t.columns[1].domain, Domain::Fsmem);
        assert_eq!(t.columns[2].domain, Domain::Dram);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = Schema::parse(
            "[[table]]\nname='t'\ncolumn=[{name='time',type='timestamp'},{name='x',type='decimal'}]",
            "f.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 3, column 55: table 't' column 'x': unknown column type"),
            "{e}"
        );
        assert!(!e.contains("decimal"), "{e}");
        let e = Schema::parse(
            "[[table]]\nname='t'\ncolumn=[{name='x',type='i64'}]",
            "f.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("timestamp column"), "{e}");
    }

    #[test]
    fn place_moves_tables_and_columns() {
        let mut s = Schema::default_schema();
        s.place(&["trade".into(), "quote.bid".into()], Domain::Fsmem)
            .unwrap();
        assert!(s
            .table("trade")
            .unwrap()
            .columns
            .iter()
            .all(|c| c.domain == Domain::Fsmem));
        let q = s.table("quote").unwrap();
        assert_eq!(q.columns[2].domain, Domain::Fsmem);
        assert_eq!(q.columns[3].domain, Domain::Dram);
        assert!(s.place(&["nope".into()], Domain::Fsmem).is_err());
    }
}
