//! `Batch`: rows for one table, held column by column in schema order.
//!
//! A batch is what ingest produces, what the journal stores (through
//! `codec`), what the tp publishes and what the store appends. Every column of
//! the table is present; a missing value is a null in `valid`.

use crate::schema::{ColumnType, TableDef};
use std::borrow::Borrow;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    Timestamp(Vec<i64>),
    /// A per-batch dictionary and one key into it per row.
    Symbol {
        dict: Vec<String>,
        keys: Vec<u32>,
    },
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
    /// `offsets.len() == rows + 1`; row i is `data[offsets[i]..offsets[i+1]]`.
    Str {
        offsets: Vec<u32>,
        data: Vec<u8>,
    },
    Bytes {
        offsets: Vec<u32>,
        data: Vec<u8>,
    },
}

impl ColumnData {
    pub fn new(ty: ColumnType) -> ColumnData {
        match ty {
            ColumnType::Timestamp => ColumnData::Timestamp(Vec::new()),
            ColumnType::Symbol => ColumnData::Symbol {
                dict: Vec::new(),
                keys: Vec::new(),
            },
            ColumnType::F64 => ColumnData::F64(Vec::new()),
            ColumnType::I64 => ColumnData::I64(Vec::new()),
            ColumnType::I32 => ColumnData::I32(Vec::new()),
            ColumnType::Bool => ColumnData::Bool(Vec::new()),
            ColumnType::Str => ColumnData::Str {
                offsets: vec![0],
                data: Vec::new(),
            },
            ColumnType::Bytes => ColumnData::Bytes {
                offsets: vec![0],
                data: Vec::new(),
            },
        }
    }

    pub fn ty(&self) -> ColumnType {
        match self {
            ColumnData::Timestamp(_) => ColumnType::Timestamp,
            ColumnData::Symbol { .. } => ColumnType::Symbol,
            ColumnData::F64(_) => ColumnType::F64,
            ColumnData::I64(_) => ColumnType::I64,
            ColumnData::I32(_) => ColumnType::I32,
            ColumnData::Bool(_) => ColumnType::Bool,
            ColumnData::Str { .. } => ColumnType::Str,
            ColumnData::Bytes { .. } => ColumnType::Bytes,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ColumnData::Timestamp(v) | ColumnData::I64(v) => v.len(),
            ColumnData::Symbol { keys, .. } => keys.len(),
            ColumnData::F64(v) => v.len(),
            ColumnData::I32(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
            ColumnData::Str { offsets, .. } | ColumnData::Bytes { offsets, .. } => {
                offsets.len().saturating_sub(1)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` of a symbol column as text.
    pub fn symbol(&self, i: usize) -> Option<&str> {
        match self {
            ColumnData::Symbol { dict, keys } => keys
                .get(i)
                .and_then(|k| dict.get(*k as usize))
                .map(|s| s.as_str()),
            _ => None,
        }
    }

    /// Appends every row of `other` (same type; a different type is ignored).
    /// Symbol dictionaries are merged, so keys stay valid.
    fn extend_from(&mut self, other: &ColumnData) {
        match (self, other) {
            (ColumnData::Timestamp(a), ColumnData::Timestamp(b))
            | (ColumnData::I64(a), ColumnData::I64(b)) => a.extend_from_slice(b),
            (ColumnData::F64(a), ColumnData::F64(b)) => a.extend_from_slice(b),
            (ColumnData::I32(a), ColumnData::I32(b)) => a.extend_from_slice(b),
            (ColumnData::Bool(a), ColumnData::Bool(b)) => a.extend_from_slice(b),
            (ColumnData::Symbol { dict, keys }, ColumnData::Symbol { dict: d2, keys: k2 }) => {
                let mut at: HashMap<&str, u32> = HashMap::with_capacity(dict.len());
                for (i, s) in dict.iter().enumerate() {
                    at.entry(s.as_str()).or_insert(i as u32);
                }
                let mut added: Vec<String> = Vec::new();
                let remap: Vec<u32> = d2
                    .iter()
                    .map(|s| match at.get(s.as_str()) {
                        Some(k) => *k,
                        None => {
                            added.push(s.clone());
                            (dict.len() + added.len() - 1) as u32
                        }
                    })
                    .collect();
                dict.extend(added);
                keys.extend(k2.iter().map(|k| remap[*k as usize]));
            }
            (
                ColumnData::Str { offsets, data },
                ColumnData::Str {
                    offsets: o2,
                    data: d2,
                },
            )
            | (
                ColumnData::Bytes { offsets, data },
                ColumnData::Bytes {
                    offsets: o2,
                    data: d2,
                },
            ) => {
                let base = data.len() as u32;
                data.extend_from_slice(d2);
                offsets.extend(o2.iter().skip(1).map(|o| base + o));
            }
            _ => {}
        }
    }

    /// Appends a type-appropriate zero; used under a null.
    fn push_default(&mut self) {
        match self {
            ColumnData::Timestamp(v) | ColumnData::I64(v) => v.push(0),
            ColumnData::Symbol { dict, keys } => {
                // A null symbol points at an empty-string dictionary entry.
                let k = match dict.iter().position(|s| s.is_empty()) {
                    Some(k) => k,
                    None => {
                        dict.push(String::new());
                        dict.len() - 1
                    }
                };
                keys.push(k as u32);
            }
            ColumnData::F64(v) => v.push(0.0),
            ColumnData::I32(v) => v.push(0),
            ColumnData::Bool(v) => v.push(false),
            ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
                offsets.push(data.len() as u32)
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub data: ColumnData,
    /// `None` when every row is valid; otherwise one flag per row.
    pub valid: Option<Vec<bool>>,
}

impl Column {
    pub fn is_valid(&self, i: usize) -> bool {
        self.valid.as_ref().map(|v| v[i]).unwrap_or(true)
    }

    /// A column of `rows` nulls of type `ty`: what rows written before
    /// `ALTER TABLE ... ADD COLUMN` hold in the new column.
    pub fn nulls(ty: ColumnType, rows: usize) -> Column {
        let mut data = ColumnData::new(ty);
        for _ in 0..rows {
            data.push_default();
        }
        Column {
            data,
            valid: Some(vec![false; rows]),
        }
    }
}

/// The table name of a schema-change marker (`Batch::schema_change`); like
/// `END_OF_DAY_TABLE`, no table can be called this.
pub const SCHEMA_CHANGE_TABLE: &str = ".u.schema";

/// The table name of an end-of-day marker (`Batch::end_of_day`). Table names
/// are letters, digits and `_`, so no table can be called this.
pub const END_OF_DAY_TABLE: &str = ".u.end";

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub table: String,
    pub rows: usize,
    pub columns: Vec<Column>,
}

impl Batch {
    /// An update that empties `table` when it is applied (the end-of-day purge,
    /// an operator's clear): a batch with no rows and no columns. It is journaled
    /// and published like any batch, so every rdb clears the table at the same
    /// sequence number, and a replay clears it again at that point.
    pub fn clear_marker(table: &str) -> Batch {
        Batch {
            table: table.to_string(),
            rows: 0,
            columns: Vec::new(),
        }
    }

    /// Whether this batch is a clear marker (see `clear_marker`).
    pub fn is_clear_marker(&self) -> bool {
        self.rows == 0
            && self.columns.is_empty()
            && self.table != END_OF_DAY_TABLE
            && self.table != SCHEMA_CHANGE_TABLE
    }

    /// An update that changes the schema at run time (`CREATE TABLE`,
    /// `ALTER TABLE ... ADD COLUMN`): the whole new schema as TOML, and the
    /// change in words (the statement, for `tickdb journal dump` and logs).
    /// The tp journals it alone in its update, so every reader (replay,
    /// subscribers, standbys) meets it exactly where it happened: records
    /// before it were written under the old schema, records after it under
    /// this one. A batch of the reserved table `SCHEMA_CHANGE_TABLE` with one
    /// row of two string columns, no validity bitmaps.
    pub fn schema_change(schema_toml: &str, what: &str) -> Batch {
        let col = |s: &str| Column {
            data: ColumnData::Str {
                offsets: vec![0, s.len() as u32],
                data: s.as_bytes().to_vec(),
            },
            valid: None,
        };
        Batch {
            table: SCHEMA_CHANGE_TABLE.to_string(),
            rows: 1,
            columns: vec![col(schema_toml), col(what)],
        }
    }

    /// The new schema's TOML and the change in words, if this batch is a
    /// schema-change marker (see `schema_change`).
    pub fn schema_change_text(&self) -> Option<(&str, &str)> {
        if self.table != SCHEMA_CHANGE_TABLE || self.rows != 1 {
            return None;
        }
        fn text(c: &Column) -> Option<&str> {
            match &c.data {
                ColumnData::Str { offsets, data } if offsets.len() == 2 => {
                    std::str::from_utf8(data.get(offsets[0] as usize..offsets[1] as usize)?).ok()
                }
                _ => None,
            }
        }
        match self.columns.as_slice() {
            [a, b] => Some((text(a)?, text(b)?)),
            _ => None,
        }
    }

    /// Whether this batch is a marker (end of day, schema change) rather
    /// than rows of a table.
    pub fn is_marker(&self) -> bool {
        self.table == END_OF_DAY_TABLE || self.table == SCHEMA_CHANGE_TABLE
    }

    /// This batch with null columns appended up to `def`'s columns: a batch
    /// written before `ALTER TABLE ... ADD COLUMN` (a prefix of the table's
    /// columns, since columns are only ever added at the end), as the table
    /// is now. Err names the first column whose type differs.
    pub fn widen(mut self, def: &TableDef) -> Result<Batch, String> {
        if self.is_clear_marker() || self.columns.len() == def.columns.len() {
            return Ok(self);
        }
        if self.columns.len() > def.columns.len() {
            return Err(format!(
                "table '{}' has {} columns, batch has {}",
                def.name,
                def.columns.len(),
                self.columns.len()
            ));
        }
        for (c, d) in self.columns.iter().zip(&def.columns) {
            if c.data.ty() != d.ty {
                return Err(format!(
                    "table '{}' column '{}' is {}, batch has {}",
                    def.name,
                    d.name,
                    d.ty.name(),
                    c.data.ty().name()
                ));
            }
        }
        let rows = self.rows;
        for d in &def.columns[self.columns.len()..] {
            self.columns.push(Column::nulls(d.ty, rows));
        }
        Ok(self)
    }

    /// An update that ends the trading day `date` (days since 1970-01-01, as
    /// Arrow's Date32): kdb+'s `.u.end`. The tp journals and publishes it
    /// like any update, so every rdb, standby and replay closes the day at
    /// the same sequence number: rows before it are that day's, rows after
    /// it the next day's. A batch of the reserved table `END_OF_DAY_TABLE`
    /// (no table can be named so) with one row of one i32 column.
    pub fn end_of_day(date: i32) -> Batch {
        Batch {
            table: END_OF_DAY_TABLE.to_string(),
            rows: 1,
            columns: vec![Column {
                data: ColumnData::I32(vec![date]),
                valid: None,
            }],
        }
    }

    /// The date this batch ends, if it is an end-of-day marker.
    pub fn end_of_day_date(&self) -> Option<i32> {
        if self.table != END_OF_DAY_TABLE || self.rows != 1 {
            return None;
        }
        match self.columns.as_slice() {
            [Column {
                data: ColumnData::I32(d),
                ..
            }] => d.first().copied(),
            _ => None,
        }
    }

    /// The rows of `parts` one after another, as one batch of their table.
    /// `None` if `parts` is empty or they differ in table or column types.
    pub fn concat<B: Borrow<Batch>>(parts: &[B]) -> Option<Batch> {
        let first = parts.first()?.borrow();
        let same = parts.iter().map(Borrow::borrow).all(|b: &Batch| {
            b.table == first.table
                && b.columns.len() == first.columns.len()
                && b.columns
                    .iter()
                    .zip(&first.columns)
                    .all(|(x, y)| x.data.ty() == y.data.ty())
        });
        if !same {
            return None;
        }
        let rows: usize = parts.iter().map(|b| b.borrow().rows).sum();
        let mut columns = Vec::with_capacity(first.columns.len());
        for ci in 0..first.columns.len() {
            let any_null = parts.iter().any(|b| b.borrow().columns[ci].valid.is_some());
            let valid = any_null.then(|| {
                let mut v = Vec::with_capacity(rows);
                for b in parts.iter().map(Borrow::borrow) {
                    match &b.columns[ci].valid {
                        Some(x) => v.extend_from_slice(x),
                        None => v.extend(std::iter::repeat_n(true, b.rows)),
                    }
                }
                v
            });
            let mut data = ColumnData::new(first.columns[ci].data.ty());
            for b in parts.iter().map(Borrow::borrow) {
                data.extend_from(&b.columns[ci].data);
            }
            columns.push(Column { data, valid });
        }
        Some(Batch {
            table: first.table.clone(),
            rows,
            columns,
        })
    }

    /// Bytes the batch holds in column data, a cheap size estimate for bounds.
    pub fn approx_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| match &c.data {
                ColumnData::Timestamp(v) | ColumnData::I64(v) => v.len() * 8,
                ColumnData::F64(v) => v.len() * 8,
                ColumnData::I32(v) => v.len() * 4,
                ColumnData::Bool(v) => v.len(),
                ColumnData::Symbol { dict, keys } => {
                    keys.len() * 4 + dict.iter().map(|s| s.len() + 2).sum::<usize>()
                }
                ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
                    offsets.len() * 4 + data.len()
                }
            })
            .sum()
    }

    /// The rows whose index is in `rows` (ascending), as a new batch.
    pub fn select(&self, rows: &[usize]) -> Batch {
        let columns = self
            .columns
            .iter()
            .map(|c| {
                let valid = c
                    .valid
                    .as_ref()
                    .map(|v| rows.iter().map(|&i| v[i]).collect());
                let data = match &c.data {
                    ColumnData::Timestamp(v) => {
                        ColumnData::Timestamp(rows.iter().map(|&i| v[i]).collect())
                    }
                    ColumnData::I64(v) => ColumnData::I64(rows.iter().map(|&i| v[i]).collect()),
                    ColumnData::F64(v) => ColumnData::F64(rows.iter().map(|&i| v[i]).collect()),
                    ColumnData::I32(v) => ColumnData::I32(rows.iter().map(|&i| v[i]).collect()),
                    ColumnData::Bool(v) => ColumnData::Bool(rows.iter().map(|&i| v[i]).collect()),
                    ColumnData::Symbol { dict, keys } => {
                        // Only the symbols the selected rows use: a batch's
                        // dictionary never outgrows its rows, which the
                        // decoder checks.
                        let mut remap: Vec<u32> = vec![u32::MAX; dict.len()];
                        let mut new_dict = Vec::new();
                        let keys = rows
                            .iter()
                            .map(|&i| {
                                let k = keys[i] as usize;
                                if remap[k] == u32::MAX {
                                    remap[k] = new_dict.len() as u32;
                                    new_dict.push(dict[k].clone());
                                }
                                remap[k]
                            })
                            .collect();
                        ColumnData::Symbol {
                            dict: new_dict,
                            keys,
                        }
                    }
                    ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
                        let mut o = Vec::with_capacity(rows.len() + 1);
                        let mut d = Vec::new();
                        o.push(0u32);
                        for &i in rows {
                            d.extend_from_slice(
                                &data[offsets[i] as usize..offsets[i + 1] as usize],
                            );
                            o.push(d.len() as u32);
                        }
                        if matches!(c.data, ColumnData::Str { .. }) {
                            ColumnData::Str {
                                offsets: o,
                                data: d,
                            }
                        } else {
                            ColumnData::Bytes {
                                offsets: o,
                                data: d,
                            }
                        }
                    }
                };
                Column { data, valid }
            })
            .collect();
        Batch {
            table: self.table.clone(),
            rows: rows.len(),
            columns,
        }
    }
}

/// A value for one cell, as ingest hands it to `BatchBuilder`.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Timestamp(i64),
    Symbol(&'a str),
    F64(f64),
    I64(i64),
    I32(i32),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
}

/// Builds a `Batch` row by row. Cells not set in a row become nulls.
/// Symbols are dictionary-encoded as they arrive.
pub struct BatchBuilder {
    table: String,
    types: Vec<ColumnType>,
    columns: Vec<ColumnData>,
    valid: Vec<Vec<bool>>,
    any_null: Vec<bool>,
    set_in_row: Vec<bool>,
    sym_lookup: Vec<HashMap<String, u32>>,
    /// Per column, the symbols the current row added to its dictionary:
    /// an abandoned row takes them out again.
    sym_added: Vec<u32>,
    rows: usize,
}

impl BatchBuilder {
    pub fn new(def: &TableDef) -> BatchBuilder {
        let n = def.columns.len();
        BatchBuilder {
            table: def.name.clone(),
            types: def.columns.iter().map(|c| c.ty).collect(),
            columns: def.columns.iter().map(|c| ColumnData::new(c.ty)).collect(),
            valid: vec![Vec::new(); n],
            any_null: vec![false; n],
            set_in_row: vec![false; n],
            sym_lookup: vec![HashMap::new(); n],
            sym_added: vec![0; n],
            rows: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn column_type(&self, col: usize) -> ColumnType {
        self.types[col]
    }

    /// Whether column `col` already has a value in the row being built.
    pub fn is_set(&self, col: usize) -> bool {
        self.set_in_row[col]
    }

    /// Sets a cell of the current row. The caller has checked that the value's
    /// variant matches the column type; a mismatch is a programming error.
    pub fn set(&mut self, col: usize, value: Value<'_>) {
        self.set_in_row[col] = true;
        match (&mut self.columns[col], value) {
            (ColumnData::Timestamp(v), Value::Timestamp(x)) => v.push(x),
            (ColumnData::I64(v), Value::I64(x)) => v.push(x),
            (ColumnData::F64(v), Value::F64(x)) => v.push(x),
            (ColumnData::I32(v), Value::I32(x)) => v.push(x),
            (ColumnData::Bool(v), Value::Bool(x)) => v.push(x),
            (ColumnData::Symbol { dict, keys }, Value::Symbol(s)) => {
                let lookup = &mut self.sym_lookup[col];
                let k = match lookup.get(s) {
                    Some(k) => *k,
                    None => {
                        let k = dict.len() as u32;
                        dict.push(s.to_string());
                        lookup.insert(s.to_string(), k);
                        self.sym_added[col] += 1;
                        k
                    }
                };
                keys.push(k);
            }
            (ColumnData::Str { offsets, data }, Value::Str(s)) => {
                data.extend_from_slice(s.as_bytes());
                offsets.push(data.len() as u32);
            }
            (ColumnData::Bytes { offsets, data }, Value::Bytes(b)) => {
                data.extend_from_slice(b);
                offsets.push(data.len() as u32);
            }
            (c, v) => panic!("BatchBuilder::set: {:?} value for {:?} column", v, c.ty()),
        }
    }

    /// Finishes the current row: unset cells become nulls.
    pub fn end_row(&mut self) {
        for col in 0..self.columns.len() {
            if self.set_in_row[col] {
                self.valid[col].push(true);
            } else {
                self.columns[col].push_default();
                self.valid[col].push(false);
                self.any_null[col] = true;
            }
            self.set_in_row[col] = false;
            self.sym_added[col] = 0;
        }
        self.rows += 1;
    }

    /// Drops the cells set so far in the current row (the row was rejected).
    pub fn abandon_row(&mut self) {
        for col in 0..self.columns.len() {
            if self.set_in_row[col] {
                truncate_to(&mut self.columns[col], self.rows);
                self.set_in_row[col] = false;
            }
            // A symbol only the abandoned row used leaves the dictionary too:
            // the codec bounds a dictionary by the batch's rows, so a batch
            // holding unused entries would not decode (found by fuzzing ILP).
            if let ColumnData::Symbol { dict, .. } = &mut self.columns[col] {
                for _ in 0..std::mem::take(&mut self.sym_added[col]) {
                    if let Some(s) = dict.pop() {
                        self.sym_lookup[col].remove(&s);
                    }
                }
            }
        }
    }

    pub fn finish(self) -> Batch {
        let columns = self
            .columns
            .into_iter()
            .zip(self.valid)
            .zip(self.any_null)
            .map(|((data, valid), any_null)| Column {
                data,
                valid: if any_null { Some(valid) } else { None },
            })
            .collect();
        Batch {
            table: self.table,
            rows: self.rows,
            columns,
        }
    }
}

fn truncate_to(c: &mut ColumnData, rows: usize) {
    match c {
        ColumnData::Timestamp(v) | ColumnData::I64(v) => v.truncate(rows),
        ColumnData::F64(v) => v.truncate(rows),
        ColumnData::I32(v) => v.truncate(rows),
        ColumnData::Bool(v) => v.truncate(rows),
        ColumnData::Symbol { keys, .. } => keys.truncate(rows),
        ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
            offsets.truncate(rows + 1);
            data.truncate(offsets[rows] as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schema;

    #[test]
    fn builder_fills_nulls_and_interns_symbols() {
        let s = Schema::default_schema();
        let mut b = BatchBuilder::new(s.table("trade").unwrap());
        b.set(0, Value::Timestamp(1));
        b.set(1, Value::Symbol("A"));
        b.set(2, Value::F64(1.5));
        b.end_row();
        b.set(0, Value::Timestamp(2));
        b.set(1, Value::Symbol("A"));
        b.set(3, Value::I64(7));
        b.end_row();
        b.set(0, Value::Timestamp(3));
        b.abandon_row();
        let batch = b.finish();
        assert_eq!(batch.rows, 2);
        assert_eq!(
            batch.columns[1].data,
            ColumnData::Symbol {
                dict: vec!["A".into()],
                keys: vec![0, 0]
            }
        );
        assert_eq!(batch.columns[2].valid, Some(vec![true, false]));
        assert_eq!(batch.columns[3].valid, Some(vec![false, true]));
        assert_eq!(batch.columns[0].valid, None);
        let sel = batch.select(&[1]);
        assert_eq!(sel.rows, 1);
        assert_eq!(sel.columns[3].data, ColumnData::I64(vec![7]));
    }

    /// A rejected row's new symbol does not stay in the dictionary: the batch
    /// must still decode, and the codec bounds a dictionary by the rows
    /// (found by fuzzing ILP: a good line, then a bad line with a new symbol).
    #[test]
    fn an_abandoned_row_takes_its_new_symbols_out_of_the_dictionary() {
        let s = Schema::default_schema();
        let mut b = BatchBuilder::new(s.table("trade").unwrap());
        b.set(0, Value::Timestamp(1));
        b.set(1, Value::Symbol("A"));
        b.end_row();
        b.set(0, Value::Timestamp(2));
        b.set(1, Value::Symbol("B"));
        b.abandon_row();
        b.set(0, Value::Timestamp(3));
        b.set(1, Value::Symbol("A"));
        b.abandon_row();
        b.set(0, Value::Timestamp(4));
        b.set(1, Value::Symbol("C"));
        b.end_row();
        let batch = b.finish();
        assert_eq!(
            batch.columns[1].data,
            ColumnData::Symbol {
                dict: vec!["A".into(), "C".into()],
                keys: vec![0, 1]
            }
        );
        let enc = crate::codec::encode_to_vec(std::slice::from_ref(&batch));
        assert_eq!(crate::codec::decode(&enc, Some(&s)).unwrap(), vec![batch]);
    }

    /// A selection of a few rows out of many symbols keeps only the symbols
    /// it uses, so it still decodes (the decoder bounds the dictionary by
    /// the row count). This is what a symbol-filtered subscription sends.
    #[test]
    fn select_compacts_the_symbol_dictionary() {
        let s = Schema::default_schema();
        let mut b = BatchBuilder::new(s.table("trade").unwrap());
        let syms = ["A", "B", "C", "D", "E"];
        for (i, sym) in syms.iter().enumerate() {
            b.set(0, Value::Timestamp(i as i64));
            b.set(1, Value::Symbol(sym));
            b.end_row();
        }
        let batch = b.finish();
        let sel = batch.select(&[3, 1, 3]);
        assert_eq!(
            sel.columns[1].data,
            ColumnData::Symbol {
                dict: vec!["D".into(), "B".into()],
                keys: vec![0, 1, 0]
            }
        );
        let bytes = crate::codec::encode_to_vec(std::slice::from_ref(&sel));
        let back = crate::codec::decode(&bytes, Some(&s)).expect("selection decodes");
        assert_eq!(back[0].columns[1].data, sel.columns[1].data);
    }
}
