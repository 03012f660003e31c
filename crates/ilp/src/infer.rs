//! `--ilp-auto-create`: the tables and columns a request's lines name that
//! the schema lacks, with their types inferred from the values as QuestDB
//! infers them, as schema changes for the tp to make
//! (`tickdb_core::schema_change`; docs/ilp.md, "Creating tables and
//! columns from ILP").
//!
//! | the line holds            | QuestDB creates | tickdb creates |
//! |---------------------------|-----------------|----------------|
//! | a tag                     | SYMBOL          | symbol         |
//! | `1.5`, `1e3`, `NaN`       | DOUBLE          | f64            |
//! | `123i` (also `123u`)      | LONG            | i64            |
//! | `"text"`                  | VARCHAR         | string         |
//! | `t`, `true`, `f`, `false` | BOOLEAN         | bool           |
//! | `123t`, `123n`            | TIMESTAMP       | timestamp      |
//!
//! A new table gets its tags first, then its fields, in the order the
//! lines first name them, and then its designated timestamp, `timestamp`,
//! which the line's trailing timestamp fills (QuestDB's layout). This is a
//! best-effort read: a line it cannot make sense of is skipped here and
//! refused by the parser with its own error afterwards.

use crate::scan::{self, FieldValue, Quoted, Stop};
use tickdb_core::schema::valid_name;
use tickdb_core::schema_change::{NewColumn, SchemaOp};
use tickdb_core::{ColumnType, Schema};

/// The designated timestamp column of a table created from ILP.
pub const AUTO_TIMESTAMP_COLUMN: &str = "timestamp";

/// The schema changes `body`'s lines need: tables the schema lacks
/// (created) and columns their tables lack (added), in the order the lines
/// name them. Empty when every name is known.
pub fn missing(schema: &Schema, body: &[u8]) -> Vec<SchemaOp> {
    let mut want = Want::default();
    for line in body.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        read_line(line, &mut want);
    }
    let mut ops = Vec::new();
    for (table, cols) in want.tables {
        match schema.table(&table) {
            None => {
                let mut columns: Vec<NewColumn> = Vec::new();
                for (name, ty) in cols {
                    if !columns.iter().any(|c| c.name == name) {
                        columns.push(NewColumn { name, ty });
                    }
                }
                if !columns.iter().any(|c| c.name == AUTO_TIMESTAMP_COLUMN) {
                    columns.push(NewColumn {
                        name: AUTO_TIMESTAMP_COLUMN.to_string(),
                        ty: ColumnType::Timestamp,
                    });
                }
                ops.push(SchemaOp::CreateTable {
                    table,
                    columns,
                    timestamp: Some(AUTO_TIMESTAMP_COLUMN.to_string()),
                    if_not_exists: true,
                });
            }
            Some(def) => {
                let mut added: Vec<String> = Vec::new();
                for (name, ty) in cols {
                    if def.column_index(&name).is_none() && !added.contains(&name) {
                        added.push(name.clone());
                        ops.push(SchemaOp::AddColumn {
                            table: table.clone(),
                            column: NewColumn { name, ty },
                            if_not_exists: true,
                        });
                    }
                }
            }
        }
    }
    ops
}

#[derive(Default)]
struct Want {
    /// Per table, in first-seen order: its columns in first-seen order.
    tables: Vec<(String, Vec<(String, ColumnType)>)>,
}

impl Want {
    fn add(&mut self, table: &str, column: String, ty: ColumnType) {
        let i = match self.tables.iter().position(|(t, _)| t == table) {
            Some(i) => i,
            None => {
                self.tables.push((table.to_string(), Vec::new()));
                self.tables.len() - 1
            }
        };
        let cols = &mut self.tables[i].1;
        if !cols.iter().any(|(c, _)| *c == column) {
            cols.push((column, ty));
        }
    }
}

/// A name from the line, if it is one tickdb takes.
fn name(raw: &[u8], escaped: bool) -> Option<String> {
    let mut out = Vec::new();
    let n = scan::unescape_unquoted(raw, escaped, &mut out);
    let s = std::str::from_utf8(n).ok()?;
    valid_name(s).then(|| s.to_string())
}

fn value_type(v: &FieldValue<'_>) -> ColumnType {
    match v {
        FieldValue::F64(_) => ColumnType::F64,
        FieldValue::Int(_) | FieldValue::UInt(_) => ColumnType::I64,
        FieldValue::Bool(_) => ColumnType::Bool,
        FieldValue::Str(_) => ColumnType::Str,
        FieldValue::TsMicros(_) | FieldValue::TsNanos(_) => ColumnType::Timestamp,
    }
}

fn read_line(line: &[u8], want: &mut Want) {
    let start = line
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(line.len());
    if start == line.len() || line[start] == b'#' {
        return;
    }
    let m = scan::scan(line, start, true, &scan::MEASUREMENT_STOPS);
    let Some(table) = name(&line[start..m.end], m.escaped) else {
        return;
    };
    let mut stop = m.stop;
    while let Stop::At(b',', at) = stop {
        let k = scan::scan(line, at + 1, true, &scan::KEY_STOPS);
        let Stop::At(b'=', e) = k.stop else { return };
        let v = scan::scan(line, e + 1, true, &scan::VALUE_STOPS);
        if let Some(key) = name(&line[at + 1..e], k.escaped) {
            want.add(&table, key, ColumnType::Symbol);
        }
        stop = v.stop;
    }
    let Stop::At(b' ', at) = stop else { return };
    let mut i = at + 1;
    while line.get(i) == Some(&b' ') {
        i += 1;
    }
    loop {
        let k = scan::scan(line, i, true, &scan::KEY_STOPS);
        let Stop::At(b'=', e) = k.stop else { return };
        let key = name(&line[i..e], k.escaped);
        let (ty, after) = if line.get(e + 1) == Some(&b'"') {
            match scan::scan_quoted(line, e + 2) {
                Quoted::Done { end, .. } => (Some(ColumnType::Str), end + 1),
                Quoted::Unterminated => return,
            }
        } else {
            let v = scan::scan(line, e + 1, true, &scan::VALUE_STOPS);
            let ty = scan::parse_unquoted(&line[e + 1..v.end])
                .ok()
                .map(|v| value_type(&v));
            (ty, v.end)
        };
        if let (Some(key), Some(ty)) = (key, ty) {
            want.add(&table, key, ty);
        }
        match line.get(after) {
            Some(b',') => i = after + 1,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_questdb_types() {
        let s = Schema::default_schema();
        let body = b"weather,city=London,station=a1 temp=12.5,hum=80i,ok=t,note=\"hi\",at=1700000000000000t 1700000000000000000\n\
                     trade,sym=A price=1.5,size=3i,venue=\"X\"\n";
        let ops = missing(&s, body);
        assert_eq!(ops.len(), 2, "{ops:?}");
        match &ops[0] {
            SchemaOp::CreateTable {
                table,
                columns,
                timestamp,
                ..
            } => {
                assert_eq!(table, "weather");
                let got: Vec<(&str, ColumnType)> =
                    columns.iter().map(|c| (c.name.as_str(), c.ty)).collect();
                assert_eq!(
                    got,
                    [
                        ("city", ColumnType::Symbol),
                        ("station", ColumnType::Symbol),
                        ("temp", ColumnType::F64),
                        ("hum", ColumnType::I64),
                        ("ok", ColumnType::Bool),
                        ("note", ColumnType::Str),
                        ("at", ColumnType::Timestamp),
                        ("timestamp", ColumnType::Timestamp),
                    ]
                );
                assert_eq!(timestamp.as_deref(), Some("timestamp"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ops[1],
            SchemaOp::AddColumn {
                table: "trade".into(),
                column: NewColumn {
                    name: "venue".into(),
                    ty: ColumnType::Str
                },
                if_not_exists: true
            }
        );
        assert!(missing(&s, b"trade,sym=A price=1.5,size=3i\n").is_empty());
    }
}
