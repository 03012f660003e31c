//! Comparing two schemas by meaning, not by text: what changed from the
//! schema a journal was written under to the one a tickerplant is started
//! with, and whether the records already journaled still mean the same.
//!
//! The record codec (`codec`) writes a batch's columns by position and type,
//! not by name, so a renamed or reordered column of the same type would
//! decode without error and silently put values in the wrong column. That is
//! why names and positions are compared here, not only types.
//!
//! The rule (documented in `docs/journal.md`, "Schema history"):
//! - **same**: the same tables (in any order) with the same columns (name,
//!   type, position), kind and key. Memory domains are ignored: they place
//!   memory, can be changed on the command line (`--fsmem`) and do not
//!   change what a record means. Comments and formatting never matter.
//! - **compatible**: every existing table is still there with the same
//!   columns, kind and key; tables may be added, and a table's designated
//!   timestamp or index column may change (they steer ingest and the
//!   in-memory index, not what a journaled record holds). Every record
//!   written before still decodes and replays to the same rows.
//! - **incompatible**: anything else: a table removed; a column added
//!   (appended or not), removed, renamed, moved or retyped; a kind or key
//!   changed. Old records would no longer decode, or would decode into
//!   different rows.

use crate::schema::{Schema, TableDef, TableKind};
use std::fmt;

/// One difference between an old and a new schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    TableAdded {
        table: String,
        columns: usize,
    },
    TableRemoved {
        table: String,
    },
    ColumnAdded {
        table: String,
        column: String,
        ty: &'static str,
        position: usize,
    },
    ColumnRemoved {
        table: String,
        column: String,
        ty: &'static str,
    },
    ColumnType {
        table: String,
        column: String,
        old: &'static str,
        new: &'static str,
    },
    ColumnsReordered {
        table: String,
        old: Vec<String>,
        new: Vec<String>,
    },
    Kind {
        table: String,
        old: String,
        new: String,
    },
    Timestamp {
        table: String,
        old: String,
        new: String,
    },
    Index {
        table: String,
        old: String,
        new: String,
    },
}

impl Difference {
    /// True when records written under the old schema still decode, and
    /// replay to the same rows, under the new one.
    pub fn is_compatible(&self) -> bool {
        matches!(
            self,
            Difference::TableAdded { .. } | Difference::Timestamp { .. } | Difference::Index { .. }
        )
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::TableAdded { table, columns } => {
                write!(f, "table '{table}' added ({columns} columns)")
            }
            Difference::TableRemoved { table } => write!(f, "table '{table}' removed"),
            Difference::ColumnAdded {
                table,
                column,
                ty,
                position,
            } => write!(
                f,
                "table '{table}' column '{column}' ({ty}) added at position {}",
                position + 1
            ),
            Difference::ColumnRemoved { table, column, ty } => {
                write!(f, "table '{table}' column '{column}' ({ty}) removed")
            }
            Difference::ColumnType {
                table,
                column,
                old,
                new,
            } => write!(f, "table '{table}' column '{column}': type {old} -> {new}"),
            Difference::ColumnsReordered { table, old, new } => write!(
                f,
                "table '{table}': columns reordered ({} -> {})",
                old.join(", "),
                new.join(", ")
            ),
            Difference::Kind { table, old, new } => {
                write!(f, "table '{table}': kind {old} -> {new}")
            }
            Difference::Timestamp { table, old, new } => {
                write!(
                    f,
                    "table '{table}': designated timestamp '{old}' -> '{new}'"
                )
            }
            Difference::Index { table, old, new } => {
                write!(f, "table '{table}': index column {old} -> {new}")
            }
        }
    }
}

/// How a new schema relates to an old one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChange {
    Same,
    /// Every difference is compatible (listed).
    Compatible(Vec<Difference>),
    /// At least one difference is incompatible; all are listed, the
    /// incompatible ones first.
    Incompatible(Vec<Difference>),
}

/// Compares `old` (what the journal was written under) with `new`.
pub fn diff(old: &Schema, new: &Schema) -> SchemaChange {
    let mut out = Vec::new();
    for ot in &old.tables {
        match new.table(&ot.name) {
            None => out.push(Difference::TableRemoved {
                table: ot.name.clone(),
            }),
            Some(nt) => diff_table(ot, nt, &mut out),
        }
    }
    for nt in &new.tables {
        if old.table(&nt.name).is_none() {
            out.push(Difference::TableAdded {
                table: nt.name.clone(),
                columns: nt.columns.len(),
            });
        }
    }
    if out.is_empty() {
        return SchemaChange::Same;
    }
    if out.iter().all(Difference::is_compatible) {
        return SchemaChange::Compatible(out);
    }
    // Stable: incompatible first, each group in schema order.
    out.sort_by_key(|d| d.is_compatible());
    SchemaChange::Incompatible(out)
}

fn diff_table(ot: &TableDef, nt: &TableDef, out: &mut Vec<Difference>) {
    let table = || ot.name.clone();
    for oc in &ot.columns {
        match nt.columns.iter().find(|c| c.name == oc.name) {
            None => out.push(Difference::ColumnRemoved {
                table: table(),
                column: oc.name.clone(),
                ty: oc.ty.name(),
            }),
            Some(nc) if nc.ty != oc.ty => out.push(Difference::ColumnType {
                table: table(),
                column: oc.name.clone(),
                old: oc.ty.name(),
                new: nc.ty.name(),
            }),
            Some(_) => {}
        }
    }
    for (i, nc) in nt.columns.iter().enumerate() {
        if ot.column_index(&nc.name).is_none() {
            out.push(Difference::ColumnAdded {
                table: table(),
                column: nc.name.clone(),
                ty: nc.ty.name(),
                position: i,
            });
        }
    }
    // Columns present in both must keep their relative order: the codec
    // matches columns by position.
    let common = |a: &TableDef, b: &TableDef| -> Vec<String> {
        a.columns
            .iter()
            .filter(|c| b.column_index(&c.name).is_some())
            .map(|c| c.name.clone())
            .collect()
    };
    let (o, n) = (common(ot, nt), common(nt, ot));
    if o != n {
        out.push(Difference::ColumnsReordered {
            table: table(),
            old: o,
            new: n,
        });
    }
    let (ok, nk) = (kind_text(ot), kind_text(nt));
    if ok != nk {
        out.push(Difference::Kind {
            table: table(),
            old: ok,
            new: nk,
        });
    }
    let ts = |t: &TableDef| t.columns[t.time_column].name.clone();
    if ts(ot) != ts(nt) {
        out.push(Difference::Timestamp {
            table: table(),
            old: ts(ot),
            new: ts(nt),
        });
    }
    let ix = |t: &TableDef| match t.sym_column {
        Some(i) => format!("'{}'", t.columns[i].name),
        None => "none".to_string(),
    };
    if ix(ot) != ix(nt) {
        out.push(Difference::Index {
            table: table(),
            old: ix(ot),
            new: ix(nt),
        });
    }
}

/// "append", or "keyed by (a, b)": keys compared by column name.
fn kind_text(t: &TableDef) -> String {
    match &t.kind {
        TableKind::Append => "append".to_string(),
        TableKind::Keyed { key } => {
            let names: Vec<&str> = key.iter().map(|i| t.columns[*i].name.as_str()).collect();
            format!("keyed by ({})", names.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(tables: &str) -> Schema {
        Schema::parse(tables, "test").unwrap()
    }

    const TRADE: &str = r#"
        [[table]]
        name = "trade"
        column = [
          { name = "time", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "price", type = "f64" },
          { name = "size", type = "i64" },
        ]
    "#;

    #[test]
    fn comments_order_of_tables_and_domains_do_not_matter() {
        let a = Schema::default_schema();
        let mut reordered = a.clone();
        reordered.tables.reverse();
        assert_eq!(diff(&a, &reordered), SchemaChange::Same);
        let mut placed = a.clone();
        placed
            .place(&["trade".into()], crate::domain::Domain::Fsmem)
            .unwrap();
        assert_eq!(diff(&a, &placed), SchemaChange::Same);
        let commented = schema(&format!("# a comment\n{TRADE}"));
        assert_eq!(diff(&schema(TRADE), &commented), SchemaChange::Same);
    }

    #[test]
    fn added_tables_are_compatible() {
        let more = format!(
            "{TRADE}\n[[table]]\nname = \"news\"\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}]\n"
        );
        match diff(&schema(TRADE), &schema(&more)) {
            SchemaChange::Compatible(d) => {
                assert_eq!(d.len(), 1);
                assert_eq!(d[0].to_string(), "table 'news' added (1 columns)");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_column_change_is_incompatible_and_named() {
        let cases = [
            (
                TRADE.replace(
                    "{ name = \"size\", type = \"i64\" }",
                    "{ name = \"size\", type = \"f64\" }",
                ),
                "table 'trade' column 'size': type i64 -> f64",
            ),
            (
                TRADE.replace("{ name = \"size\", type = \"i64\" },", ""),
                "table 'trade' column 'size' (i64) removed",
            ),
            (
                TRADE.replace(
                    "{ name = \"size\", type = \"i64\" },",
                    "{ name = \"size\", type = \"i64\" }, { name = \"venue\", type = \"symbol\" },",
                ),
                "table 'trade' column 'venue' (symbol) added at position 5",
            ),
            (
                // Same types in the same places, another name: the codec
                // would decode it without complaint.
                TRADE.replace("\"price\"", "\"px\""),
                "table 'trade' column 'price' (f64) removed",
            ),
            (
                TRADE.replace(
                    "{ name = \"price\", type = \"f64\" },\n          { name = \"size\", type = \"i64\" },",
                    "{ name = \"size\", type = \"i64\" },\n          { name = \"price\", type = \"f64\" },",
                ),
                "table 'trade': columns reordered (time, sym, price, size -> time, sym, size, price)",
            ),
            (
                TRADE.replace("name = \"trade\"", "name = \"trade\"\nkind = \"keyed\"\nkey = [\"sym\"]"),
                "table 'trade': kind append -> keyed by (sym)",
            ),
        ];
        for (new, want) in cases {
            match diff(&schema(TRADE), &schema(&new)) {
                SchemaChange::Incompatible(d) => {
                    assert!(
                        d.iter().any(|x| x.to_string() == want),
                        "want {want:?} in {:?}",
                        d.iter().map(|x| x.to_string()).collect::<Vec<_>>()
                    );
                    assert!(!d[0].is_compatible());
                }
                other => panic!("{want}: {other:?}"),
            }
        }
        match diff(&Schema::default_schema(), &schema(TRADE)) {
            SchemaChange::Incompatible(d) => {
                assert!(d.iter().any(|x| x.to_string() == "table 'quote' removed"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timestamp_and_index_changes_are_compatible() {
        let a = schema(TRADE);
        // Naming the default index explicitly changes nothing.
        let b = schema(&TRADE.replace("name = \"trade\"", "name = \"trade\"\nindex = \"sym\""));
        assert_eq!(diff(&a, &b), SchemaChange::Same);
        let mut c = a.clone();
        c.tables[0].sym_column = None;
        match diff(&a, &c) {
            SchemaChange::Compatible(d) => {
                assert_eq!(
                    d[0].to_string(),
                    "table 'trade': index column 'sym' -> none"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
