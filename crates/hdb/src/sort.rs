//! Sorting a day's rows by (sym, time) and planning its row groups.
//!
//! The input is many Arrow batches (an rdb's chunks, an import's file) that
//! can hold tens of millions of rows, so the sort never materialises sorted
//! copies of the columns: it computes one `u64` per row (`batch << 32 | row`)
//! in output order, and the writer gathers one slice of rows at a time.
//! Memory on top of the input: 8 bytes a row, plus one symbol table.
//!
//! How: each batch's dictionary keys are mapped to ranks in one global,
//! byte-ordered list of the symbols (rank 0 is the null symbol, so nulls sort
//! first); a counting sort by rank, in input order, gives each symbol's rows
//! as one segment (stable); each segment is then sorted by time with a stable
//! sort, skipped when it is already in order, which is the usual case for
//! ticks that arrive in time order.

use std::collections::HashMap;
use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampNanosecondType, UInt32Type};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, TimeUnit};
use tickdb_core::TableDef;

use crate::error::HdbError;

/// A day's rows in (sym, time) order, as positions in the input batches.
pub(crate) struct SortedRows {
    /// The distinct symbols of the input, ascending by bytes: rank `r >= 1`
    /// is `symbols[r - 1]`. Empty when the table has no sym column.
    pub symbols: StringArray,
    /// `(batch << 32) | row` of each output row, in output order.
    pub order: Vec<u64>,
    /// Each symbol's run in `order`: (rank, rows), in rank order, empty runs
    /// left out. Without a sym column: one run of rank 0.
    pub runs: Vec<(u32, usize)>,
    /// Where each run ends in `order` (exclusive), for finding the run of
    /// an output row.
    pub run_ends: Vec<usize>,
}

impl SortedRows {
    pub fn rows(&self) -> usize {
        self.order.len()
    }
}

/// The (batch, row) a packed position stands for.
#[inline]
pub(crate) fn unpack(p: u64) -> (usize, usize) {
    ((p >> 32) as usize, (p & 0xffff_ffff) as usize)
}

fn time_of(times: &[&[i64]], valid: &[Option<arrow_array::BooleanArray>], p: u64) -> i64 {
    let (b, r) = unpack(p);
    match &valid[b] {
        // A null time sorts before every time of its symbol (declared as
        // nulls_first on the time sorting column).
        Some(v) if !v.value(r) => i64::MIN,
        _ => times[b][r],
    }
}

/// Checks that every batch has the table's Arrow types, column by column.
pub(crate) fn check_input(
    def: &TableDef,
    expected: &arrow_schema::Schema,
    batches: &[RecordBatch],
) -> Result<(), HdbError> {
    for (bi, b) in batches.iter().enumerate() {
        if b.num_columns() != expected.fields().len() {
            return Err(HdbError::Input {
                table: def.name.clone(),
                batch: bi,
                what: format!(
                    "{} columns, the table has {}",
                    b.num_columns(),
                    expected.fields().len()
                ),
            });
        }
        for (c, f) in b.columns().iter().zip(expected.fields()) {
            if c.data_type() != f.data_type() {
                return Err(HdbError::Input {
                    table: def.name.clone(),
                    batch: bi,
                    what: format!(
                        "column '{}' is {}, the table's type is {}",
                        f.name(),
                        c.data_type(),
                        f.data_type()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Sorts the rows of `batches` (already checked by `check_input`) by
/// (sym, time), stably.
pub(crate) fn sort_rows(def: &TableDef, batches: &[RecordBatch]) -> Result<SortedRows, HdbError> {
    let input_err = |batch: usize, what: String| HdbError::Input {
        table: def.name.clone(),
        batch,
        what,
    };
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    if batches.len() > u32::MAX as usize {
        return Err(input_err(0, "more than 2^32 batches".into()));
    }
    if let Some(bi) = batches
        .iter()
        .position(|b| b.num_rows() > u32::MAX as usize)
    {
        return Err(input_err(bi, "more than 2^32 rows in one batch".into()));
    }

    // Times, by batch; the null masks only where there are nulls.
    let mut times: Vec<&[i64]> = Vec::with_capacity(batches.len());
    let mut tvalid: Vec<Option<arrow_array::BooleanArray>> = Vec::with_capacity(batches.len());
    for (bi, b) in batches.iter().enumerate() {
        let col = b.column(def.time_column);
        if col.data_type() != &DataType::Timestamp(TimeUnit::Nanosecond, None) {
            return Err(input_err(bi, format!("time column is {}", col.data_type())));
        }
        let t = col.as_primitive::<TimestampNanosecondType>();
        times.push(t.values().as_ref());
        tvalid.push(
            t.nulls()
                .filter(|n| n.null_count() > 0)
                .map(|n| arrow_array::BooleanArray::new(n.inner().clone(), None)),
        );
    }

    let Some(sym) = def.sym_column else {
        // No sym column: one run, ordered by time alone.
        let mut order: Vec<u64> = Vec::with_capacity(total);
        for (bi, b) in batches.iter().enumerate() {
            order.extend((0..b.num_rows()).map(|r| ((bi as u64) << 32) | r as u64));
        }
        sort_segment(&mut order, &times, &tvalid);
        let runs = if total > 0 { vec![(0, total)] } else { vec![] };
        return Ok(SortedRows {
            symbols: StringArray::from(Vec::<&str>::new()),
            order,
            run_ends: run_ends(&runs),
            runs,
        });
    };

    // The distinct dictionaries: batches cut from one store share theirs,
    // so each is ranked once (identified by its offsets buffer and length).
    let mut dict_of_batch: Vec<usize> = Vec::with_capacity(batches.len());
    let mut dicts: Vec<StringArray> = Vec::new();
    let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
    for (bi, b) in batches.iter().enumerate() {
        let col = b.column(sym);
        let Some(d) = col.as_dictionary_opt::<UInt32Type>() else {
            return Err(input_err(
                bi,
                format!(
                    "sym column is {}, not Dictionary(UInt32, Utf8)",
                    col.data_type()
                ),
            ));
        };
        let Some(values) = d.values().as_string_opt::<i32>() else {
            return Err(input_err(
                bi,
                format!("sym dictionary values are {}", d.values().data_type()),
            ));
        };
        let id = (values.value_offsets().as_ptr() as usize, values.len());
        let di = *seen.entry(id).or_insert_with(|| {
            dicts.push(values.clone());
            dicts.len() - 1
        });
        dict_of_batch.push(di);
    }

    // All symbols, ranked by byte order (str's Ord is byte order).
    let mut all: Vec<&str> = dicts.iter().flat_map(|d| d.iter().flatten()).collect();
    all.sort_unstable();
    all.dedup();
    if all.len() >= u32::MAX as usize {
        return Err(input_err(0, "more than 2^32 - 1 distinct symbols".into()));
    }
    // rank_of[dict][key] = 1 + position in `all`, or 0 for a null value.
    let rank_of: Vec<Vec<u32>> = dicts
        .iter()
        .map(|d| {
            d.iter()
                .map(|v| match v {
                    // Present by construction of `all`.
                    Some(s) => all.binary_search(&s).map_or(0, |i| i as u32 + 1),
                    None => 0,
                })
                .collect()
        })
        .collect();

    // The ranks of one batch's rows, into `out` (reused across batches).
    let ranks = |bi: usize, out: &mut Vec<u32>| -> Result<(), HdbError> {
        let d = batches[bi].column(sym).as_dictionary::<UInt32Type>();
        let map = &rank_of[dict_of_batch[bi]];
        out.clear();
        for (r, k) in d.keys().iter().enumerate() {
            out.push(match k {
                None => 0,
                Some(k) => *map.get(k as usize).ok_or_else(|| {
                    input_err(
                        bi,
                        format!("row {r}: sym key {k} is outside its dictionary"),
                    )
                })?,
            });
        }
        Ok(())
    };

    // Counting sort by rank: stable, so each symbol's rows stay in input order.
    let mut buf: Vec<u32> = Vec::new();
    let mut counts = vec![0usize; all.len() + 1];
    for bi in 0..batches.len() {
        ranks(bi, &mut buf)?;
        for &rk in &buf {
            counts[rk as usize] += 1;
        }
    }
    let mut runs = Vec::new();
    let mut next = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for (rk, &n) in counts.iter().enumerate() {
        next.push(at);
        if n > 0 {
            runs.push((rk as u32, n));
        }
        at += n;
    }
    drop(counts);
    let mut order = vec![0u64; total];
    for bi in 0..batches.len() {
        ranks(bi, &mut buf)?;
        for (r, &rk) in buf.iter().enumerate() {
            let slot = &mut next[rk as usize];
            order[*slot] = ((bi as u64) << 32) | r as u64;
            *slot += 1;
        }
    }
    drop(next);

    // Each symbol's segment by time.
    let mut start = 0;
    for &(_, n) in &runs {
        sort_segment(&mut order[start..start + n], &times, &tvalid);
        start += n;
    }

    let symbols = StringArray::from(all);
    Ok(SortedRows {
        symbols,
        order,
        run_ends: run_ends(&runs),
        runs,
    })
}

fn run_ends(runs: &[(u32, usize)]) -> Vec<usize> {
    runs.iter()
        .scan(0usize, |at, &(_, n)| {
            *at += n;
            Some(*at)
        })
        .collect()
}

/// Sorts one symbol's positions by time, stably; a pass first, since ticks
/// mostly arrive in time order already.
fn sort_segment(seg: &mut [u64], times: &[&[i64]], valid: &[Option<arrow_array::BooleanArray>]) {
    let sorted = seg
        .windows(2)
        .all(|w| time_of(times, valid, w[0]) <= time_of(times, valid, w[1]));
    if !sorted {
        seg.sort_by_key(|&p| time_of(times, valid, p));
    }
}

/// The sym column (Utf8) of output rows `range`: each row's symbol by rank.
pub(crate) fn sym_slice(sorted: &SortedRows, range: Range<usize>) -> Result<ArrayRef, HdbError> {
    let mut keys: Vec<Option<u32>> = Vec::with_capacity(range.len());
    // The first run that ends after range.start (runs can number millions,
    // and this is called once per slice of a row group).
    let mut i = sorted.run_ends.partition_point(|&e| e <= range.start);
    let mut at = range.start;
    while at < range.end && i < sorted.runs.len() {
        let (rk, _) = sorted.runs[i];
        let hi = sorted.run_ends[i].min(range.end);
        let k = if rk == 0 { None } else { Some(rk - 1) };
        keys.extend(std::iter::repeat_n(k, hi - at));
        at = hi;
        i += 1;
    }
    let idx = UInt32Array::from(keys);
    arrow_select::take::take(&sorted.symbols, &idx, None)
        .map_err(|e| HdbError::arrow("<sort>", "gather symbols", e))
}

/// Splits sorted rows into row groups that follow symbol runs (kdb+'s
/// `p#`): a group ends only where a symbol ends, and is closed as soon as
/// it holds at least `floor` rows; a group never exceeds `cap` rows, so a
/// symbol longer than `cap` is cut into `cap`-row pieces that start their
/// own groups. Every symbol of at most `cap` rows lies in exactly one row
/// group, so a reader that filters on one sym reads one group.
pub(crate) fn plan_row_groups(
    run_lens: impl IntoIterator<Item = usize>,
    floor: usize,
    cap: usize,
) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0usize; // the open group is start..pos
    let mut pos = 0usize;
    for len in run_lens {
        if len > cap {
            if pos > start {
                groups.push(start..pos);
            }
            let mut left = len;
            while left > cap {
                groups.push(pos..pos + cap);
                pos += cap;
                left -= cap;
            }
            // The rest (1..=cap rows) opens a group of its own.
            start = pos;
            pos += left;
        } else {
            if pos > start && pos - start + len > cap {
                groups.push(start..pos);
                start = pos;
            }
            pos += len;
        }
        if pos - start >= floor {
            groups.push(start..pos);
            start = pos;
        }
    }
    if pos > start {
        groups.push(start..pos);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::plan_row_groups;

    fn check(runs: &[usize], floor: usize, cap: usize) -> Vec<std::ops::Range<usize>> {
        let g = plan_row_groups(runs.iter().copied(), floor, cap);
        // Contiguous, cover everything, within the cap.
        let total: usize = runs.iter().sum();
        let mut at = 0;
        for r in &g {
            assert_eq!(r.start, at);
            assert!(!r.is_empty() && r.len() <= cap, "{g:?}");
            at = r.end;
        }
        assert_eq!(at, total);
        // Each run of <= cap rows in exactly one group.
        let mut s = 0;
        for &n in runs {
            if n > 0 && n <= cap {
                let inside = g.iter().filter(|r| r.start < s + n && s < r.end).count();
                assert_eq!(inside, 1, "run {s}..{} in {g:?}", s + n);
            }
            s += n;
        }
        g
    }

    #[test]
    fn groups_follow_runs() {
        assert_eq!(check(&[3, 3, 3, 3], 5, 10), vec![0..6, 6..12]);
        assert_eq!(
            check(&[2, 25, 1], 5, 10),
            vec![0..2, 2..12, 12..22, 22..27, 27..28]
        );
        assert_eq!(check(&[9, 9], 20, 10), vec![0..9, 9..18]);
        assert_eq!(check(&[20], 5, 10), vec![0..10, 10..20]);
        assert_eq!(check(&[], 5, 10), Vec::<std::ops::Range<usize>>::new());
        check(&[1, 7, 3, 11, 4, 4, 4, 30, 2, 9, 1, 1], 6, 10);
    }
}
