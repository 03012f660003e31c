//! q objects to and from tickdb's data: a `.u.upd`'s data into a `Batch`
//! checked against the schema, a published update into the q table a
//! subscriber gets, a query's Arrow result into a q table.
//!
//! Types (docs/ipc.md has the table): timestamp ↔ q timestamp, symbol ↔ q
//! symbol, f64 ↔ q float, i64 ↔ q long, i32 ↔ q int, bool ↔ q boolean,
//! str ↔ q string (a list of char vectors), bytes ↔ a list of byte
//! vectors. q's nulls are SQL nulls here and back.

use super::QError;
use std::borrow::Cow;
use std::collections::HashMap;
use tickdb_core::batch::{Batch, Column, ColumnData};
use tickdb_core::schema::{ColumnType, TableDef};
use tickdb_ipc::temporal::{self, Q_EPOCH_NS};
use tickdb_ipc::value::nulls;
use tickdb_ipc::{Atom, Kind, Table, Vector, K};

/// The data of a `.u.upd` / `insert` as column vectors, each `rows` long,
/// in the table's column order. `now_ns` stamps a missing time column
/// (kdb+tick's rule: the tp stamps data that comes without its time).
pub fn batch_from_q(def: &TableDef, data: &K, now_ns: i64) -> Result<Batch, QError> {
    let cols = columns_of(def, data)?;
    let ncols = def.columns.len();
    let stamped = cols.len() + 1 == ncols;
    if cols.len() != ncols && !stamped {
        return Err(QError::new(
            "length",
            format!(
                "{} has {ncols} columns; the data has {} (or send all but the time column `{}`, which the tp then stamps)",
                def.name,
                cols.len(),
                def.columns[def.time_column].name
            ),
        ));
    }
    let rows = cols.first().map(|c| c.count()).unwrap_or(0);
    for (i, c) in cols.iter().enumerate() {
        if c.count() != rows {
            return Err(QError::new(
                "length",
                format!(
                    "{}: data column {i} has {} item(s), the first {rows}",
                    def.name,
                    c.count()
                ),
            ));
        }
    }
    let mut given = cols.into_iter();
    let mut columns = Vec::with_capacity(ncols);
    for (i, cd) in def.columns.iter().enumerate() {
        if stamped && i == def.time_column {
            columns.push(Column {
                data: ColumnData::Timestamp(vec![now_ns; rows]),
                valid: None,
            });
            continue;
        }
        let Some(c) = given.next() else {
            return Err(QError::new(
                "length",
                format!("{}: too few columns", def.name),
            ));
        };
        columns.push(
            column_from_q(c.as_ref(), cd.ty, rows, now_ns).map_err(|(ty, got)| {
                QError::new(
                    "type",
                    format!("column `{}` of {} is {ty}; got {got}", cd.name, def.name),
                )
            })?,
        );
    }
    Ok(Batch {
        table: def.name.clone(),
        rows,
        columns,
    })
}

/// The data's columns, from a table (matched by name), column vectors or
/// one row of atoms; borrowed where the data already holds them.
fn columns_of<'a>(def: &TableDef, data: &'a K) -> Result<Vec<Cow<'a, K>>, QError> {
    match data {
        K::Table(t) => {
            let mut out = Vec::with_capacity(def.columns.len());
            for (i, cd) in def.columns.iter().enumerate() {
                match t.names.iter().position(|n| *n == cd.name) {
                    Some(j) => out.push(Cow::Borrowed(&t.columns[j])),
                    // Only the time column may be missing: then it is
                    // stamped, and it must not take a place in `out`.
                    None if i == def.time_column => {}
                    None => {
                        return Err(QError::new(
                            "length",
                            format!("{}: the table sent has no column `{}`", def.name, cd.name),
                        ))
                    }
                }
            }
            if let Some(extra) = t
                .names
                .iter()
                .find(|n| def.column_index(n).is_none())
            {
                return Err(QError::new(
                    "length",
                    format!("{} has no column `{extra}`", def.name),
                ));
            }
            Ok(out)
        }
        K::List(items) if items.iter().all(|k| matches!(k, K::Atom(_))) && !items.is_empty() => {
            // One row of atoms.
            Ok(items.iter().map(|k| Cow::Owned(enlist(k))).collect())
        }
        K::List(items) => Ok(items.iter().map(Cow::Borrowed).collect()),
        // A row of atoms of one type arrives as a typed vector.
        K::Vector { v, .. } => Ok((0..v.len())
            .filter_map(|i| v.get(i))
            .map(|a| Cow::Owned(enlist(&K::Atom(a))))
            .collect()),
        K::Dict { keys, values, .. } if matches!(**keys, K::Vector { v: Vector::Symbol(_), .. }) => {
            // A dictionary of column name to values: a table by another name.
            let (K::Vector { v: Vector::Symbol(names), .. }, K::List(cols)) = (&**keys, &**values)
            else {
                return Err(QError::new("type", "a dictionary's values must be a list of columns".into()));
            };
            let mut out = Vec::with_capacity(def.columns.len());
            for (i, cd) in def.columns.iter().enumerate() {
                match names.iter().position(|n| *n == cd.name) {
                    Some(j) => match cols.get(j) {
                        Some(c) => out.push(Cow::Borrowed(c)),
                        None => return Err(QError::new("length", "a dictionary with fewer values than keys".into())),
                    },
                    None if i == def.time_column => {}
                    None => {
                        return Err(QError::new(
                            "length",
                            format!("{}: the dictionary sent has no column `{}`", def.name, cd.name),
                        ))
                    }
                }
            }
            Ok(out)
        }
        other => Err(QError::new(
            "type",
            format!(
                "the data for {} is of type {}: send a table, a list of column vectors or one row of atoms",
                def.name,
                other.type_code()
            ),
        )),
    }
}

/// A one-item vector (or list) holding `k`.
fn enlist(k: &K) -> K {
    match k {
        K::Atom(a) => {
            let mut v = Vector::empty(a.kind());
            v.push(a);
            K::vector(v)
        }
        other => K::List(vec![other.clone()]),
    }
}

/// What a q value is called in an error.
fn q_name(k: &K) -> String {
    match k {
        K::Vector { v, .. } => format!("a {} vector", v.kind().name()),
        K::Atom(a) => format!("a {} atom", a.kind().name()),
        K::List(_) => "a general list".into(),
        other => format!("an object of type {}", other.type_code()),
    }
}

type ColResult = Result<Column, (&'static str, String)>;

fn column_from_q(k: &K, ty: ColumnType, rows: usize, now_ns: i64) -> ColResult {
    let bad = |want: &'static str| (want, q_name(k));
    match ty {
        ColumnType::Timestamp => {
            let K::Vector { v, .. } = k else {
                return Err(bad("a timestamp"));
            };
            let day = now_ns.div_euclid(temporal::NS_PER_DAY) * temporal::NS_PER_DAY;
            let (data, valid): (Vec<i64>, Vec<bool>) = match v {
                Vector::Long(Kind::Timestamp, x) => x
                    .iter()
                    .map(|q| match temporal::unix_ns_from_timestamp(*q) {
                        Some(ns) => (ns, true),
                        None if *q == nulls::LONG_NULL => (0, false),
                        None => (*q, true),
                    })
                    .unzip(),
                // kdb+tick's own schemas keep a timespan (the time of day):
                // it is today's (UTC) time.
                Vector::Long(Kind::Timespan, x) => x
                    .iter()
                    .map(|s| {
                        if *s == nulls::LONG_NULL {
                            (0, false)
                        } else {
                            (day.saturating_add(*s), true)
                        }
                    })
                    .unzip(),
                Vector::Int(Kind::Date, x) => x
                    .iter()
                    .map(|d| match temporal::unix_ns_from_date(*d) {
                        Some(ns) => (ns, true),
                        None => (0, false),
                    })
                    .unzip(),
                Vector::Float(Kind::Datetime, x) => x
                    .iter()
                    .map(|z| match temporal::unix_ns_from_datetime(*z) {
                        Some(ns) => (ns, true),
                        None => (0, false),
                    })
                    .unzip(),
                _ => return Err(bad("a timestamp")),
            };
            Ok(with_valid(ColumnData::Timestamp(data), valid))
        }
        ColumnType::Symbol => {
            let texts: Vec<&str> = match k {
                K::Vector {
                    v: Vector::Symbol(s),
                    ..
                } => s.iter().map(|s| s.as_str()).collect(),
                K::List(items) => {
                    let mut t = Vec::with_capacity(items.len());
                    for i in items {
                        t.push(i.as_text().ok_or_else(|| bad("a symbol"))?);
                    }
                    t
                }
                _ => return Err(bad("a symbol")),
            };
            let mut dict: Vec<String> = Vec::new();
            let mut at: HashMap<&str, u32> = HashMap::new();
            let mut keys = Vec::with_capacity(rows);
            let mut valid = Vec::with_capacity(rows);
            for s in texts {
                let k = *at.entry(s).or_insert_with(|| {
                    dict.push(s.to_string());
                    (dict.len() - 1) as u32
                });
                keys.push(k);
                // q's null symbol is the empty one.
                valid.push(!s.is_empty());
            }
            Ok(with_valid(ColumnData::Symbol { dict, keys }, valid))
        }
        ColumnType::F64 => {
            let K::Vector { v, .. } = k else {
                return Err(bad("a float"));
            };
            let data: Vec<f64> = match v {
                Vector::Float(Kind::Float, x) => x.clone(),
                Vector::Real(x) => x.iter().map(|f| *f as f64).collect(),
                Vector::Long(Kind::Long, x) => widen(x, nulls::LONG_NULL, f64::NAN, |i| i as f64),
                Vector::Int(Kind::Int, x) => widen(x, nulls::INT_NULL, f64::NAN, f64::from),
                Vector::Short(x) => widen(x, nulls::SHORT_NULL, f64::NAN, f64::from),
                _ => return Err(bad("a float")),
            };
            // q's float null is NaN.
            let valid = data.iter().map(|f| !f.is_nan()).collect();
            Ok(with_valid(ColumnData::F64(data), valid))
        }
        ColumnType::I64 => {
            let K::Vector { v, .. } = k else {
                return Err(bad("a long"));
            };
            let data: Vec<i64> = match v {
                Vector::Long(Kind::Long, x) => x.clone(),
                Vector::Int(Kind::Int, x) => widen(x, nulls::INT_NULL, nulls::LONG_NULL, i64::from),
                Vector::Short(x) => widen(x, nulls::SHORT_NULL, nulls::LONG_NULL, i64::from),
                Vector::Byte(x) => x.iter().map(|b| *b as i64).collect(),
                _ => return Err(bad("a long")),
            };
            let valid = data.iter().map(|i| *i != nulls::LONG_NULL).collect();
            Ok(with_valid(ColumnData::I64(data), valid))
        }
        ColumnType::I32 => {
            let K::Vector { v, .. } = k else {
                return Err(bad("an int"));
            };
            let data: Vec<i32> = match v {
                Vector::Int(Kind::Int, x) => x.clone(),
                Vector::Short(x) => widen(x, nulls::SHORT_NULL, nulls::INT_NULL, i32::from),
                Vector::Byte(x) => x.iter().map(|b| *b as i32).collect(),
                _ => return Err(bad("an int")),
            };
            let valid = data.iter().map(|i| *i != nulls::INT_NULL).collect();
            Ok(with_valid(ColumnData::I32(data), valid))
        }
        ColumnType::Bool => match k {
            K::Vector {
                v: Vector::Bool(x), ..
            } => Ok(with_valid(ColumnData::Bool(x.clone()), vec![true; x.len()])),
            _ => Err(bad("a boolean")),
        },
        ColumnType::Str | ColumnType::Bytes => {
            let mut offsets = vec![0u32];
            let mut data = Vec::new();
            let mut push = |b: &[u8]| {
                data.extend_from_slice(b);
                offsets.push(data.len() as u32);
            };
            match k {
                K::List(items) => {
                    for i in items {
                        match i {
                            K::Vector {
                                v: Vector::Char(c), ..
                            } if ty == ColumnType::Str => push(c),
                            K::Vector {
                                v: Vector::Byte(c), ..
                            } if ty == ColumnType::Bytes => push(c),
                            K::Atom(Atom::Char(c)) if ty == ColumnType::Str => push(&[*c]),
                            _ => {
                                return Err(bad(if ty == ColumnType::Str {
                                    "a string"
                                } else {
                                    "bytes"
                                }))
                            }
                        }
                    }
                }
                K::Vector {
                    v: Vector::Symbol(s),
                    ..
                } if ty == ColumnType::Str => s.iter().for_each(|s| push(s.as_bytes())),
                // One row: a single string.
                K::Vector {
                    v: Vector::Char(c), ..
                } if ty == ColumnType::Str && rows == 1 => push(c),
                _ => {
                    return Err(bad(if ty == ColumnType::Str {
                        "a string"
                    } else {
                        "bytes"
                    }))
                }
            }
            if ty == ColumnType::Str && std::str::from_utf8(&data).is_err() {
                return Err(("a UTF-8 string", "bytes that are not UTF-8".into()));
            }
            let n = offsets.len() - 1;
            let data = if ty == ColumnType::Str {
                ColumnData::Str { offsets, data }
            } else {
                ColumnData::Bytes { offsets, data }
            };
            Ok(with_valid(data, vec![true; n]))
        }
    }
}

/// Widens integers, q's null of the narrower type becoming the wider
/// type's null.
fn widen<T: Copy + PartialEq, U: Copy>(
    x: &[T],
    null: T,
    null_out: U,
    conv: impl Fn(T) -> U,
) -> Vec<U> {
    x.iter()
        .map(|v| if *v == null { null_out } else { conv(*v) })
        .collect()
}

fn with_valid(data: ColumnData, valid: Vec<bool>) -> Column {
    let all = valid.iter().all(|v| *v);
    Column {
        data,
        valid: if all { None } else { Some(valid) },
    }
}

/// The q type a tickdb column is sent as.
pub fn q_kind(ty: ColumnType) -> Option<Kind> {
    match ty {
        ColumnType::Timestamp => Some(Kind::Timestamp),
        ColumnType::Symbol => Some(Kind::Symbol),
        ColumnType::F64 => Some(Kind::Float),
        ColumnType::I64 => Some(Kind::Long),
        ColumnType::I32 => Some(Kind::Int),
        ColumnType::Bool => Some(Kind::Bool),
        // Strings and bytes are general lists in q.
        ColumnType::Str | ColumnType::Bytes => None,
    }
}

/// An empty q table with `def`'s columns (`.u.sub`'s answer, `meta`).
pub fn empty_table(def: &TableDef) -> K {
    K::Table(Table {
        attr: 0,
        names: def.columns.iter().map(|c| c.name.clone()).collect(),
        columns: def
            .columns
            .iter()
            .map(|c| match q_kind(c.ty) {
                Some(k) => K::vector(Vector::empty(k)),
                None => K::List(Vec::new()),
            })
            .collect(),
    })
}

/// The q table of a published batch.
pub fn table_from_batch(def: &TableDef, b: &Batch) -> K {
    let columns = b.columns.iter().map(|c| column_to_q(c, b.rows)).collect();
    K::Table(Table {
        attr: 0,
        // A batch from before a column was added holds a prefix of them.
        names: def
            .columns
            .iter()
            .take(b.columns.len())
            .map(|c| c.name.clone())
            .collect(),
        columns,
    })
}

fn column_to_q(c: &Column, rows: usize) -> K {
    let ok = |i: usize| c.is_valid(i);
    match &c.data {
        ColumnData::Timestamp(v) => K::vector(Vector::Long(
            Kind::Timestamp,
            (0..rows)
                .map(|i| {
                    if ok(i) {
                        v[i].saturating_sub(Q_EPOCH_NS)
                    } else {
                        nulls::LONG_NULL
                    }
                })
                .collect(),
        )),
        ColumnData::Symbol { dict, keys } => K::vector(Vector::Symbol(
            (0..rows)
                .map(|i| {
                    if ok(i) {
                        dict.get(keys[i] as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .collect(),
        )),
        ColumnData::F64(v) => K::vector(Vector::Float(
            Kind::Float,
            (0..rows)
                .map(|i| if ok(i) { v[i] } else { f64::NAN })
                .collect(),
        )),
        ColumnData::I64(v) => K::vector(Vector::Long(
            Kind::Long,
            (0..rows)
                .map(|i| if ok(i) { v[i] } else { nulls::LONG_NULL })
                .collect(),
        )),
        ColumnData::I32(v) => K::vector(Vector::Int(
            Kind::Int,
            (0..rows)
                .map(|i| if ok(i) { v[i] } else { nulls::INT_NULL })
                .collect(),
        )),
        ColumnData::Bool(v) => K::vector(Vector::Bool((0..rows).map(|i| ok(i) && v[i]).collect())),
        ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
            let is_str = matches!(c.data, ColumnData::Str { .. });
            K::List(
                (0..rows)
                    .map(|i| {
                        let b = data[offsets[i] as usize..offsets[i + 1] as usize].to_vec();
                        K::vector(if is_str {
                            Vector::Char(b)
                        } else {
                            Vector::Byte(b)
                        })
                    })
                    .collect(),
            )
        }
    }
}
