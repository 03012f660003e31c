//! The bytes of a row's key columns: two rows of a keyed table are the same
//! key exactly when these bytes are equal. One encoding serves the store's
//! latest-row-per-key snapshot and the rdb's persisted row records; they
//! differ only in how a symbol is written (`SymbolBytes`).
//!
//! Per key column: `0` for null, or `1` then the value: 8 bytes LE for
//! timestamps and i64, 4 for i32, 1 for bool; u32 LE length then the bytes for
//! strings and binaries; symbols per `SymbolBytes`.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampNanosecondType, UInt32Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;

/// How a symbol value is written into key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolBytes {
    /// The table's dictionary id (4 bytes LE): cheap, and enough within one
    /// process, where ids never change.
    Id,
    /// The symbol's text (u32 LE length, then UTF-8): the same in every
    /// process, for bytes that are persisted.
    Text,
}

/// Appends the key bytes of row `row` of `batch`'s `key_columns` to `out`.
pub fn row_key_bytes(
    batch: &RecordBatch,
    key_columns: &[usize],
    row: usize,
    symbols: SymbolBytes,
    out: &mut Vec<u8>,
) {
    for &c in key_columns {
        value_bytes(batch.column(c).as_ref(), row, symbols, out);
    }
}

fn text_bytes(s: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s);
}

fn value_bytes(array: &dyn Array, row: usize, symbols: SymbolBytes, out: &mut Vec<u8>) {
    if array.is_null(row) {
        out.push(0);
        return;
    }
    out.push(1);
    match array.data_type() {
        DataType::Timestamp(_, _) => out.extend_from_slice(
            &array
                .as_primitive::<TimestampNanosecondType>()
                .value(row)
                .to_le_bytes(),
        ),
        DataType::Int64 => {
            out.extend_from_slice(&array.as_primitive::<Int64Type>().value(row).to_le_bytes())
        }
        DataType::Int32 => {
            out.extend_from_slice(&array.as_primitive::<Int32Type>().value(row).to_le_bytes())
        }
        DataType::Boolean => out.push(array.as_boolean().value(row) as u8),
        DataType::Dictionary(_, _) => {
            let d = array.as_dictionary::<UInt32Type>();
            let id = d.keys().value(row);
            match symbols {
                SymbolBytes::Id => out.extend_from_slice(&id.to_le_bytes()),
                SymbolBytes::Text => {
                    let values = d.values().as_string::<i32>();
                    let s = if (id as usize) < values.len() {
                        values.value(id as usize)
                    } else {
                        ""
                    };
                    text_bytes(s.as_bytes(), out);
                }
            }
        }
        DataType::Utf8 => text_bytes(array.as_string::<i32>().value(row).as_bytes(), out),
        DataType::Binary => text_bytes(array.as_binary::<i32>().value(row), out),
        // The schema refuses float keys; anything else has no key bytes.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{DictionaryArray, Int64Array, StringArray, UInt32Array};
    use std::sync::Arc;

    /// The same symbol under two dictionaries (two processes) has the same
    /// text bytes but different id bytes; nulls differ from every value.
    #[test]
    fn symbols_by_id_or_text() {
        let batch = |keys: Vec<u32>, names: Vec<&str>| {
            let dict =
                DictionaryArray::new(UInt32Array::from(keys), Arc::new(StringArray::from(names)));
            let n = Int64Array::from(vec![Some(7), None]);
            RecordBatch::try_from_iter([
                ("sym", Arc::new(dict) as Arc<dyn Array>),
                ("n", Arc::new(n) as Arc<dyn Array>),
            ])
            .unwrap()
        };
        let a = batch(vec![0, 1], vec!["AAPL", "IBM"]);
        let b = batch(vec![1, 0], vec!["IBM", "AAPL"]);
        let sym = |b: &RecordBatch, row, s| {
            let mut out = Vec::new();
            row_key_bytes(b, &[0], row, s, &mut out);
            out
        };
        assert_eq!(sym(&a, 0, SymbolBytes::Text), sym(&b, 0, SymbolBytes::Text));
        assert_ne!(sym(&a, 0, SymbolBytes::Id), sym(&b, 0, SymbolBytes::Id));
        let bytes = |b: &RecordBatch, row, s| {
            let mut out = Vec::new();
            row_key_bytes(b, &[0, 1], row, s, &mut out);
            out
        };
        let mut want = vec![1, 4, 0, 0, 0];
        want.extend_from_slice(b"AAPL");
        want.push(1);
        want.extend_from_slice(&7i64.to_le_bytes());
        assert_eq!(bytes(&a, 0, SymbolBytes::Text), want);
        assert_eq!(
            *bytes(&a, 1, SymbolBytes::Text).last().unwrap(),
            0,
            "a null is one 0 byte"
        );
    }
}
