//! InfluxDB line protocol (ILP) → schema-checked `Batch`es.
//!
//! This crate owns the ingest text format: it parses lines the way QuestDB
//! and InfluxDB accept them, so the `questdb` clients (TCP and HTTP) and
//! other ILP writers work unchanged, and checks every value against the
//! schema. Tables are schema-first: a line for an unknown table or column is
//! an error, never an implicit create.
//!
//! # Line format
//!
//! ```text
//! measurement[,tag=value...][ field=value[,field=value...]][ timestamp]\n
//! ```
//!
//! - The measurement names the table. It escapes comma and space with a
//!   backslash; tag keys, tag values and field keys also escape `=`.
//!   A backslash before `\`, newline or CR also escapes it (the QuestDB
//!   clients write those); a backslash before any other byte is kept.
//! - A line needs at least one field (InfluxDB's rule): a tag-only line
//!   such as `trade,sym=A 1700000000000000000` would store a trade with no
//!   price and no size, and is rejected. The one exception is a table whose
//!   columns, but for its time column, are all symbols or strings: tags can
//!   fill its rows whole, and QuestDB's clients write symbol-only rows so.
//!   Runs of spaces between the sections are tolerated, as is trailing
//!   space.
//! - Lines end with `\n` or `\r\n`. Empty lines and lines whose first
//!   non-blank byte is `#` are skipped (they still count for line numbers).
//! - Line numbers count records: a quoted string may hold raw newlines
//!   (QuestDB accepts them), and those do not start a new line number.
//!
//! # Values and how they meet column types (QuestDB's rules)
//!
//! | written            | meaning                 | accepted by columns of type                         |
//! |--------------------|-------------------------|-----------------------------------------------------|
//! | tag value          | symbol                  | symbol, string                                      |
//! | `1.5` `1e3` `-0.0` | float                   | f64                                                 |
//! | `NaN` `Infinity` `-Infinity` | float (any case, also `inf`) | f64                               |
//! | `123i`             | signed integer          | i64, i32 (range-checked), f64 (converted), timestamp (as **microseconds**, as QuestDB does) |
//! | `123u`             | unsigned integer        | i64 / i32 (range-checked), f64                      |
//! | `t` `true` `f` ... | bool (`t T true True TRUE f F false False FALSE`) | bool                      |
//! | `"text"`           | string (`\"`, `\\` escapes; raw newlines allowed) | string, symbol, bytes (UTF-8 bytes) |
//! | `123t`             | timestamp, microseconds | timestamp                                           |
//! | `123n`             | timestamp, nanoseconds  | timestamp                                           |
//!
//! A float into an integer column is an error (write it as `123i`), as is a
//! plain number into a timestamp column. A value starting with `=` (`col==`)
//! is ILP protocol version 2's binary encoding (f64 arrays, binary doubles):
//! tickdb speaks version 1 only and rejects it with a message saying so.
//!
//! # Timestamps
//!
//! The trailing timestamp fills the table's designated time column
//! (`TableDef::time_column`). Its unit is `IlpOptions::precision`
//! (nanoseconds by default; HTTP's `precision=` parameter changes it); a
//! `n` or `t` suffix on it (newer clients) overrides that with nanoseconds
//! or microseconds. Without a trailing timestamp the time column gets the
//! field of that name if the line sets one, else `IlpOptions::now_ns`.
//! Setting it both as a field and by the trailing timestamp is an error.
//!
//! Accepted timestamps, trailing or in a timestamp field, lie in
//! `TIMESTAMP_NS_MIN ..= TIMESTAMP_NS_MAX`, 1678-01-01T00:00:00Z ..=
//! 2261-12-31T23:59:59.999999999Z: the whole years that nanoseconds in an
//! i64 hold. That keeps out kdb+'s null timestamp (`0Np`, i64::MIN) and its
//! infinities (`0Wp` = i64::MAX, `-0Wp`), which a kdb+ client would read as
//! missing or infinite, and leaves room for date arithmetic (a day's
//! partition, a time bucket) without overflow.
//!
//! # Names, symbols and strings
//!
//! - Table and column names are the schema's (`[A-Za-z_][A-Za-z0-9_]*`); a
//!   name holding a control character (bytes 0x00-0x1f and 0x7f, NUL above
//!   all) is rejected as such rather than as an unknown name.
//! - A symbol (a tag, or a quoted string, filling a symbol column) may hold
//!   any UTF-8 text except control characters: symbols are identifiers
//!   shown in logs, results and filters. Escaped spaces, commas and `=` are
//!   ordinary symbol text; an escaped newline parses but is a control
//!   character, so it is rejected.
//! - A string (a quoted value, or a tag, filling a string column) may hold
//!   any UTF-8 text except NUL: PostgreSQL's text type, which psql, psycopg
//!   and JDBC receive, cannot carry it. Tabs, newlines and other control
//!   characters are kept.
//! - A quoted string filling a bytes column is binary data: NUL is kept.
//! - Error messages write control characters as `\xNN`.
//!
//! # Other checks
//!
//! A column set twice in one line is an error. A keyed table needs every
//! key column in every line. Every error names the line (numbered from the
//! `line_no` / `first_line_no` the caller passes) and the reason, and a bad
//! line leaves nothing behind in the batches.

pub mod infer;
mod scan;

use scan::{FieldValue, Quoted, Stop, Token};
use std::collections::HashMap;
use tickdb_core::batch::Value;
use tickdb_core::{Batch, BatchBuilder, ColumnType, Schema, TableDef, TableKind};

/// Default bound on one line, in bytes (including its newline).
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// Earliest accepted timestamp: 1678-01-01T00:00:00Z, in ns since the epoch.
pub const TIMESTAMP_NS_MIN: i64 = -9_214_560_000_000_000_000;
/// Latest accepted timestamp: 2261-12-31T23:59:59.999999999Z.
pub const TIMESTAMP_NS_MAX: i64 = 9_214_646_399_999_999_999;
/// The accepted range, as error messages and the docs write it.
pub const TIMESTAMP_RANGE_TEXT: &str = "1678-01-01T00:00:00Z ..= 2261-12-31T23:59:59.999999999Z";

/// Tables with more columns than this get a hash map for column lookup;
/// smaller ones are scanned linearly, which is faster at that size.
const COLUMNS_LINEAR_MAX: usize = 16;
/// Schemas with more tables than this get a hash map for table lookup.
const TABLES_LINEAR_MAX: usize = 16;
/// Column-position guesses remembered per table (by a key's position in the
/// line); bounds the cache for lines with absurd numbers of keys.
const GUESSES_MAX: usize = 256;

/// The unit of a trailing timestamp without a suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanos,
    Micros,
    Millis,
    Seconds,
}

impl Precision {
    /// Parses InfluxDB's and QuestDB's precision names: `n`/`ns`, `u`/`us`,
    /// `ms`, `s`.
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "n" | "ns" => Precision::Nanos,
            "u" | "us" | "µ" | "µs" => Precision::Micros,
            "ms" => Precision::Millis,
            "s" => Precision::Seconds,
            _ => return None,
        })
    }

    /// Nanoseconds per unit.
    pub fn nanos(self) -> i64 {
        match self {
            Precision::Nanos => 1,
            Precision::Micros => 1_000,
            Precision::Millis => 1_000_000,
            Precision::Seconds => 1_000_000_000,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Nanos => "ns",
            Precision::Micros => "us",
            Precision::Millis => "ms",
            Precision::Seconds => "s",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct IlpOptions {
    /// Unit of a trailing timestamp without a suffix.
    pub precision: Precision,
    /// Time given to rows without a trailing timestamp, ns since the epoch.
    pub now_ns: i64,
    /// Longest accepted line in bytes, its newline included.
    pub line_bytes_max: usize,
}

impl Default for IlpOptions {
    fn default() -> Self {
        IlpOptions {
            precision: Precision::Nanos,
            now_ns: 0,
            line_bytes_max: LINE_BYTES_MAX,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IlpError {
    /// A line that does not parse or does not fit the schema.
    #[error("line {line}: {reason}")]
    Line { line: u64, reason: String },
}

impl IlpError {
    /// The 1-based number of the offending line.
    pub fn line(&self) -> u64 {
        match self {
            IlpError::Line { line, .. } => *line,
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            IlpError::Line { reason, .. } => reason,
        }
    }
}

/// How parsing one line ended.
enum Parsed {
    /// A row was added (or the line was blank or a comment); the next line
    /// starts at this index.
    Line { next: usize },
    /// The buffer ends inside this line.
    More,
}

/// Per schema table, kept for the batcher's life: lookup caches.
struct TableCache<'s> {
    def: &'s TableDef,
    /// For the k-th key of a line, the column it named last time: lines
    /// from one writer repeat their layout, so this usually hits at once.
    guesses: Vec<u16>,
    /// Column name -> index, only for wide tables.
    names: Option<HashMap<&'s [u8], usize>>,
    /// Bytes per row of the fixed-width parts, for `approx_bytes`.
    row_bytes: usize,
    /// Every column but the designated time column is a symbol or a string,
    /// so tags alone can fill a row (see `parse_rest`).
    tags_fill_row: bool,
    /// Index into `IlpBatcher::open` of this table's builder, if open.
    open: Option<usize>,
}

impl<'s> TableCache<'s> {
    fn new(def: &'s TableDef) -> Self {
        let names = (def.columns.len() > COLUMNS_LINEAR_MAX).then(|| {
            def.columns
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name.as_bytes(), i))
                .collect()
        });
        let row_bytes = def
            .columns
            .iter()
            .map(|c| match c.ty {
                ColumnType::Timestamp | ColumnType::F64 | ColumnType::I64 => 8,
                ColumnType::I32 | ColumnType::Symbol | ColumnType::Str | ColumnType::Bytes => 4,
                ColumnType::Bool => 1,
            })
            .sum();
        let tags_fill_row = def.columns.iter().enumerate().all(|(i, c)| {
            i == def.time_column || matches!(c.ty, ColumnType::Symbol | ColumnType::Str)
        });
        TableCache {
            def,
            guesses: Vec::new(),
            names,
            row_bytes,
            tags_fill_row,
            open: None,
        }
    }

    #[inline]
    fn column(&mut self, name: &[u8], k: usize) -> Option<usize> {
        if let Some(&g) = self.guesses.get(k) {
            if same(self.def.columns[g as usize].name.as_bytes(), name) {
                return Some(g as usize);
            }
        }
        let found = match &self.names {
            Some(map) => map.get(name).copied(),
            None => self
                .def
                .columns
                .iter()
                .position(|c| same(c.name.as_bytes(), name)),
        }?;
        if k < GUESSES_MAX {
            if self.guesses.len() <= k {
                self.guesses.resize(k + 1, 0);
            }
            self.guesses[k] = found as u16;
        }
        Some(found)
    }
}

/// Table and column lookup, with its caches.
struct Lookup<'s> {
    /// Indexed like `Schema::tables`; filled on a table's first line.
    caches: Vec<Option<TableCache<'s>>>,
    /// Table name -> index, only for schemas with many tables.
    table_names: Option<HashMap<&'s [u8], usize>>,
    /// The table of the previous line: consecutive lines mostly share one.
    last_table: Option<usize>,
}

impl<'s> Lookup<'s> {
    #[inline]
    fn table(&mut self, schema: &Schema, name: &[u8]) -> Result<usize, String> {
        if let Some(t) = self.last_table {
            if same(schema.tables[t].name.as_bytes(), name) {
                return Ok(t);
            }
        }
        let found = match &self.table_names {
            Some(map) => map.get(name).copied(),
            None => schema
                .tables
                .iter()
                .position(|t| same(t.name.as_bytes(), name)),
        };
        match found {
            Some(t) => {
                self.last_table = Some(t);
                Ok(t)
            }
            // Schema names are `[A-Za-z_][A-Za-z0-9_]*`, so a name that
            // matched holds no control character: only a miss needs the check.
            None => Err(match control_byte(name) {
                Some((_, b)) => format!(
                    "table name '{}' holds a control character (byte 0x{b:02x})",
                    lossy(name)
                ),
                None => format!("unknown table '{}'", lossy(name)),
            }),
        }
    }

    #[inline]
    fn column(&mut self, line: &mut LineState, name: &[u8]) -> Result<usize, String> {
        let cache = self.caches[line.t]
            .as_mut()
            .expect("a table has its cache once it has a builder");
        let k = line.keys;
        line.keys += 1;
        cache
            .column(name, k)
            .ok_or_else(|| match control_byte(name) {
                Some((_, b)) => format!(
                    "column name '{}' holds a control character (byte 0x{b:02x})",
                    lossy(name)
                ),
                None => format!(
                    "unknown column '{}' in table '{}'",
                    lossy(name),
                    cache.def.name
                ),
            })
    }
}

/// A table that has rows (or a row in progress) in the current batch.
struct OpenTable {
    builder: BatchBuilder,
    row_bytes: usize,
    /// String and bytes data held, for `approx_bytes`.
    var_bytes: usize,
}

/// Accumulates lines into one `BatchBuilder` per table, in the order the
/// tables first appear.
pub struct IlpBatcher<'s> {
    schema: &'s Schema,
    opts: IlpOptions,
    lookup: Lookup<'s>,
    open: Vec<OpenTable>,
    rows: usize,
    scratch: Scratch,
}

/// Reused buffers for unescaping, so escaped lines do not allocate either.
#[derive(Default)]
struct Scratch {
    name: Vec<u8>,
    value: Vec<u8>,
}

impl<'s> IlpBatcher<'s> {
    pub fn new(schema: &'s Schema, opts: IlpOptions) -> Self {
        let table_names = (schema.tables.len() > TABLES_LINEAR_MAX).then(|| {
            schema
                .tables
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.as_bytes(), i))
                .collect()
        });
        IlpBatcher {
            schema,
            opts,
            lookup: Lookup {
                caches: (0..schema.tables.len()).map(|_| None).collect(),
                table_names,
                last_table: None,
            },
            open: Vec::new(),
            rows: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn options(&self) -> &IlpOptions {
        &self.opts
    }

    /// Changes the time given to lines without a trailing timestamp (a
    /// long-lived TCP connection refreshes it before each read).
    pub fn set_now_ns(&mut self, now_ns: i64) {
        self.opts.now_ns = now_ns;
    }

    /// Parses one line, given without its newline (a trailing `\r` is
    /// ignored); `line_no` is its 1-based number. On error nothing of this
    /// line is kept. Blank and comment lines are accepted and add nothing.
    pub fn push_line(&mut self, line: &[u8], line_no: u64) -> Result<(), IlpError> {
        match self.parse_line(line, 0, true) {
            Ok(_) => Ok(()),
            Err(reason) => Err(IlpError::Line {
                line: line_no,
                reason,
            }),
        }
    }

    /// Parses every complete line in `buf` (each ended by `\n`) and returns
    /// the bytes consumed (up to and including the last complete line's
    /// newline), the number of lines consumed, and the first error, if any.
    /// Parsing stops at the first bad line: the lines before it are kept,
    /// nothing of it is, and it is not counted as consumed. A partial last
    /// line (no newline yet) is not consumed, unless it is already longer
    /// than `line_bytes_max`, which is an error.
    pub fn push_buffer(
        &mut self,
        buf: &[u8],
        first_line_no: u64,
    ) -> (usize, u64, Option<IlpError>) {
        let max = self.opts.line_bytes_max;
        // No line can end after the last newline, so parse only up to it:
        // a partial tail is then never parsed twice as bytes trickle in.
        let limit = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => 0,
        };
        let lines_buf = &buf[..limit];
        let mut pos = 0;
        let mut lines = 0u64;
        while pos < limit {
            match self.parse_line(lines_buf, pos, false) {
                Ok(Parsed::Line { next }) => {
                    pos = next;
                    lines += 1;
                }
                Ok(Parsed::More) => break,
                Err(reason) => {
                    let line = first_line_no + lines;
                    return (pos, lines, Some(IlpError::Line { line, reason }));
                }
            }
        }
        if buf.len() - pos > max {
            let reason =
                format!("line is over {max} bytes with no end yet (the bound is line_bytes_max)");
            let line = first_line_no + lines;
            return (pos, lines, Some(IlpError::Line { line, reason }));
        }
        (pos, lines, None)
    }

    /// Rows accepted so far (since `new` or the last `take`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// An estimate of the bytes the pending batches hold (fixed-width
    /// column data plus string bytes), for flush bounds.
    pub fn approx_bytes(&self) -> usize {
        self.open
            .iter()
            .map(|o| o.builder.rows() * o.row_bytes + o.var_bytes)
            .sum()
    }

    /// One batch per table that got rows, in the order the tables first
    /// appeared.
    pub fn finish(mut self) -> Vec<Batch> {
        self.take()
    }

    /// Like `finish`, but keeps the batcher (and its lookup caches) for more
    /// lines; a TCP connection flushes this way.
    pub fn take(&mut self) -> Vec<Batch> {
        let open = std::mem::take(&mut self.open);
        for c in self.lookup.caches.iter_mut().flatten() {
            c.open = None;
        }
        self.rows = 0;
        open.into_iter()
            .filter(|o| o.builder.rows() > 0)
            .map(|o| o.builder.finish())
            .collect()
    }

    /// Parses the line starting at `buf[start]`. With `complete`, the end of
    /// `buf` ends the line, and the line must reach it. On `Err` or `More`
    /// nothing of the line is kept.
    fn parse_line(&mut self, buf: &[u8], start: usize, complete: bool) -> Result<Parsed, String> {
        let max = self.opts.line_bytes_max;
        let check_end = |next: usize| -> Result<Parsed, String> {
            if next - start > max {
                return Err(format!(
                    "line is {} bytes, over the bound of {max} (line_bytes_max)",
                    next - start
                ));
            }
            if complete && next != buf.len() {
                return Err(
                    "unexpected newline inside the line (pass several lines to push_buffer)"
                        .to_string(),
                );
            }
            Ok(Parsed::Line { next })
        };
        // Skip leading blanks; then a blank line or a comment is skipped.
        let mut i = start;
        while i < buf.len() && matches!(buf[i], b' ' | b'\t') {
            i += 1;
        }
        if let Some(stop) = scan::eol_at(buf, i, complete) {
            return match stop {
                Stop::Eol { next, .. } => check_end(next),
                _ => Ok(Parsed::More),
            };
        }
        if buf[i] == b'#' {
            return match buf[i..].iter().position(|&b| b == b'\n') {
                Some(n) => check_end(i + n + 1),
                None if complete => check_end(buf.len()),
                None => Ok(Parsed::More),
            };
        }

        // The measurement names the table.
        let m = scan::scan(buf, i, complete, &scan::MEASUREMENT_STOPS);
        if m.stop == Stop::More {
            return Ok(Parsed::More);
        }
        let name = scan::unescape_unquoted(&buf[i..m.end], m.escaped, &mut self.scratch.name);
        if name.is_empty() {
            return Err("missing table name at the start of the line".to_string());
        }
        let t = self.lookup.table(self.schema, name)?;
        let slot = self.open_slot(t);
        let mut line = LineState {
            t,
            slot,
            keys: 0,
            var_bytes: 0,
        };
        let result = self.parse_rest(buf, m, complete, &mut line);
        let result = match result {
            Ok(Some(next)) => check_end(next).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        let open = &mut self.open[slot];
        match result {
            Ok(Some(parsed)) => {
                open.builder.end_row();
                open.var_bytes += line.var_bytes;
                self.rows += 1;
                Ok(parsed)
            }
            Ok(None) => {
                open.builder.abandon_row();
                Ok(Parsed::More)
            }
            Err(e) => {
                open.builder.abandon_row();
                Err(e)
            }
        }
    }

    /// Everything after the measurement. `Ok(Some(next))`: the row is
    /// complete and the next line starts at `next`; `Ok(None)`: more bytes
    /// are needed.
    fn parse_rest(
        &mut self,
        buf: &[u8],
        m: Token,
        complete: bool,
        line: &mut LineState,
    ) -> Result<Option<usize>, String> {
        let mut tags = 0usize;
        let mut stop = m.stop;
        // Tags: `,key=value` until a space or the line end.
        while let Stop::At(b',', at) = stop {
            let k = scan::scan(buf, at + 1, complete, &scan::KEY_STOPS);
            let key_end = match k.stop {
                Stop::More => return Ok(None),
                Stop::At(b'=', e) => e,
                _ => {
                    let key = lossy(&buf[at + 1..k.end]);
                    return Err(if key.is_empty() {
                        "empty tag name after ','".to_string()
                    } else {
                        format!("tag '{key}' has no '=value'")
                    });
                }
            };
            let v = scan::scan(buf, key_end + 1, complete, &scan::VALUE_STOPS);
            if v.stop == Stop::More {
                return Ok(None);
            }
            let key =
                scan::unescape_unquoted(&buf[at + 1..key_end], k.escaped, &mut self.scratch.name);
            if key.is_empty() {
                return Err("empty tag name".to_string());
            }
            let col = self.lookup.column(line, key)?;
            let val = scan::unescape_unquoted(
                &buf[key_end + 1..v.end],
                v.escaped,
                &mut self.scratch.value,
            );
            let def = &self.schema.tables[line.t];
            let cdef = &def.columns[col];
            if val.is_empty() {
                return Err(format!("tag '{}' has an empty value", cdef.name));
            }
            let builder = &mut self.open[line.slot].builder;
            check_unset(builder, def, col)?;
            let s = std::str::from_utf8(val)
                .map_err(|_| format!("tag '{}' is not valid UTF-8", cdef.name))?;
            match cdef.ty {
                ColumnType::Symbol => builder.set(col, Value::Symbol(check_symbol(&cdef.name, s)?)),
                ColumnType::Str => {
                    line.var_bytes += s.len();
                    builder.set(col, Value::Str(check_string(&cdef.name, s)?))
                }
                ty => {
                    return Err(format!(
                        "column '{}' in table '{}' is {}; a tag can only fill a symbol or string column",
                        cdef.name,
                        def.name,
                        ty.name()
                    ))
                }
            }
            tags += 1;
            stop = v.stop;
        }

        // Fields: ` key=value[,key=value...]`, then the timestamp.
        let mut fields = 0usize;
        let mut ts_token: Option<(usize, usize)> = None;
        let next_line = match stop {
            Stop::Eol { next, .. } => next,
            Stop::At(b' ', at) => {
                let mut i = skip_spaces(buf, at + 1);
                loop {
                    match scan::eol_at(buf, i, complete) {
                        Some(Stop::Eol { .. }) if fields > 0 => {
                            return Err("empty field name after ','".to_string())
                        }
                        Some(Stop::Eol { next, .. }) => break next,
                        Some(_) => return Ok(None),
                        None => {}
                    }
                    let k = scan::scan(buf, i, complete, &scan::KEY_STOPS);
                    let key_end = match k.stop {
                        Stop::More => return Ok(None),
                        Stop::At(b'=', e) => e,
                        Stop::At(b' ', _) | Stop::Eol { .. } if fields == 0 && tags > 0 => {
                            // `table,tag=x 1700000000000000000`: no fields;
                            // this token is the trailing timestamp.
                            ts_token = Some((i, k.end));
                            match after_timestamp(buf, k, complete)? {
                                Some(next) => break next,
                                None => return Ok(None),
                            }
                        }
                        _ => {
                            let key = lossy(&buf[i..k.end]);
                            return Err(if key.is_empty() {
                                "empty field name".to_string()
                            } else {
                                format!("field '{key}' has no '=value'")
                            });
                        }
                    };
                    let vstart = key_end + 1;
                    let (vstop, raw) = match buf.get(vstart) {
                        Some(b'"') => match scan::scan_quoted(buf, vstart + 1) {
                            Quoted::Done { end, escaped } => {
                                let after = match buf.get(end + 1) {
                                    Some(b',') => Stop::At(b',', end + 1),
                                    Some(b' ') => Stop::At(b' ', end + 1),
                                    _ => match scan::eol_at(buf, end + 1, complete) {
                                        Some(Stop::More) => return Ok(None),
                                        Some(s) => s,
                                        None => {
                                            return Err(format!(
                                                "field '{}': unexpected {} after the closing quote",
                                                lossy(&buf[i..key_end]),
                                                show_byte(buf[end + 1])
                                            ))
                                        }
                                    },
                                };
                                (after, RawValue::Quoted(vstart + 1, end, escaped))
                            }
                            Quoted::Unterminated if complete => {
                                return Err(format!(
                                    "field '{}': string value has no closing quote",
                                    lossy(&buf[i..key_end])
                                ))
                            }
                            Quoted::Unterminated => return Ok(None),
                        },
                        Some(b'=') => {
                            return Err(format!(
                                "field '{}': binary value ('==', ILP protocol version 2) is not supported; \
                                 tickdb speaks ILP version 1 (text): configure the client with protocol_version=1",
                                lossy(&buf[i..key_end])
                            ))
                        }
                        _ => {
                            let v = scan::scan(buf, vstart, complete, &scan::VALUE_STOPS);
                            if v.stop == Stop::More {
                                return Ok(None);
                            }
                            (v.stop, RawValue::Plain(vstart, v.end))
                        }
                    };
                    let key = scan::unescape_unquoted(
                        &buf[i..key_end],
                        k.escaped,
                        &mut self.scratch.name,
                    );
                    if key.is_empty() {
                        return Err("empty field name".to_string());
                    }
                    let col = self.lookup.column(line, key)?;
                    self.set_field(buf, line, col, raw)?;
                    fields += 1;
                    match vstop {
                        Stop::At(b',', at) => i = at + 1,
                        Stop::At(b' ', at) => {
                            // The trailing timestamp, if any.
                            let ts = skip_spaces(buf, at + 1);
                            match scan::eol_at(buf, ts, complete) {
                                Some(Stop::Eol { next, .. }) => break next,
                                Some(_) => return Ok(None),
                                None => {}
                            }
                            let t = scan::scan(buf, ts, complete, &scan::SPACE_STOPS);
                            if t.stop == Stop::More {
                                return Ok(None);
                            }
                            ts_token = Some((ts, t.end));
                            match after_timestamp(buf, t, complete)? {
                                Some(next) => break next,
                                None => return Ok(None),
                            }
                        }
                        Stop::Eol { next, .. } => break next,
                        Stop::At(..) | Stop::More => {
                            unreachable!("value scans stop only at ',', ' ' or a line end")
                        }
                    }
                }
            }
            Stop::At(..) | Stop::More => unreachable!("the tag loop leaves only ' ' or a line end"),
        };
        if fields == 0 {
            let name = &self.schema.tables[line.t].name;
            if tags == 0 {
                return Err(format!("line for table '{name}' has no tags or fields"));
            }
            // InfluxDB requires a field in every line; a tag-only line for a
            // table with value columns would store a row of nulls (a trade
            // without price or size), which is a writer's bug. Tables that
            // tags can fill whole take it: QuestDB's clients write
            // symbol-only rows that way.
            let fills = self.lookup.caches[line.t]
                .as_ref()
                .is_some_and(|c| c.tags_fill_row);
            if !fills {
                return Err(format!(
                    "line for table '{name}' has tags but no fields; a line needs at least one \
                     field (e.g. 'value=1.5') unless every column of the table but its time column \
                     is a symbol or string"
                ));
            }
        }
        let ts = match ts_token {
            Some((s, e)) => Some(trailing_timestamp(&buf[s..e], self.opts.precision)?),
            None => None,
        };
        self.finish_row(line, ts)?;
        Ok(Some(next_line))
    }

    /// Fills the time column and checks the line as a whole.
    fn finish_row(&mut self, line: &LineState, ts: Option<i64>) -> Result<(), String> {
        let def = &self.schema.tables[line.t];
        let builder = &mut self.open[line.slot].builder;
        let tc = def.time_column;
        match ts {
            Some(ns) => {
                if builder.is_set(tc) {
                    return Err(format!(
                        "column '{}' is set both as a field and by the trailing timestamp",
                        def.columns[tc].name
                    ));
                }
                builder.set(tc, Value::Timestamp(ns));
            }
            None => {
                if !builder.is_set(tc) {
                    builder.set(tc, Value::Timestamp(self.opts.now_ns));
                }
            }
        }
        if let TableKind::Keyed { key } = &def.kind {
            for &k in key {
                if !builder.is_set(k) {
                    return Err(format!(
                        "keyed table '{}' needs its key column '{}' in every line",
                        def.name, def.columns[k].name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Finds (or opens) the builder for schema table `t`.
    fn open_slot(&mut self, t: usize) -> usize {
        let def = &self.schema.tables[t];
        let cache = self.lookup.caches[t].get_or_insert_with(|| TableCache::new(def));
        match cache.open {
            Some(slot) => slot,
            None => {
                let slot = self.open.len();
                self.open.push(OpenTable {
                    builder: BatchBuilder::new(def),
                    row_bytes: cache.row_bytes,
                    var_bytes: 0,
                });
                cache.open = Some(slot);
                slot
            }
        }
    }

    fn set_field(
        &mut self,
        buf: &[u8],
        line: &mut LineState,
        col: usize,
        raw: RawValue,
    ) -> Result<(), String> {
        let def = &self.schema.tables[line.t];
        let cdef = &def.columns[col];
        let builder = &mut self.open[line.slot].builder;
        check_unset(builder, def, col)?;
        let (value, text): (FieldValue, &[u8]) = match raw {
            RawValue::Quoted(s, e, escaped) => {
                let bytes = scan::unescape_quoted(&buf[s..e], escaped, &mut self.scratch.value);
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| format!("field '{}': string is not valid UTF-8", cdef.name))?;
                (FieldValue::Str(s), &[])
            }
            RawValue::Plain(s, e) => {
                let text = &buf[s..e];
                let v = scan::parse_unquoted(text).map_err(|why| {
                    format!("field '{}': bad value '{}': {why}", cdef.name, lossy(text))
                })?;
                (v, text)
            }
        };
        let out_of_range = |unit: &str| {
            format!(
                "column '{}' in table '{}' is {}: value '{}' is out of its range{unit}",
                cdef.name,
                def.name,
                cdef.ty.name(),
                lossy(text)
            )
        };
        let timestamp = |ns: i64| {
            check_timestamp(ns).map_err(|why| {
                format!(
                    "column '{}' in table '{}': timestamp '{}' {why}",
                    cdef.name,
                    def.name,
                    lossy(text)
                )
            })
        };
        let v = match (cdef.ty, value) {
            (ColumnType::F64, FieldValue::F64(x)) => Value::F64(x),
            (ColumnType::F64, FieldValue::Int(x)) => Value::F64(x as f64),
            (ColumnType::F64, FieldValue::UInt(x)) => Value::F64(x as f64),
            (ColumnType::I64, FieldValue::Int(x)) => Value::I64(x),
            (ColumnType::I64, FieldValue::UInt(x)) => {
                Value::I64(i64::try_from(x).map_err(|_| out_of_range(""))?)
            }
            (ColumnType::I32, FieldValue::Int(x)) => {
                Value::I32(i32::try_from(x).map_err(|_| out_of_range(""))?)
            }
            (ColumnType::I32, FieldValue::UInt(x)) => {
                Value::I32(i32::try_from(x).map_err(|_| out_of_range(""))?)
            }
            (ColumnType::Timestamp, FieldValue::TsNanos(x)) => Value::Timestamp(timestamp(x)?),
            // QuestDB reads an integer into a timestamp column as micros.
            (ColumnType::Timestamp, FieldValue::TsMicros(x) | FieldValue::Int(x)) => {
                Value::Timestamp(timestamp(
                    x.checked_mul(1_000)
                        .ok_or_else(|| out_of_range(" in nanoseconds"))?,
                )?)
            }
            (ColumnType::Bool, FieldValue::Bool(x)) => Value::Bool(x),
            (ColumnType::Str, FieldValue::Str(s)) => {
                line.var_bytes += s.len();
                Value::Str(check_string(&cdef.name, s)?)
            }
            (ColumnType::Symbol, FieldValue::Str(s)) => Value::Symbol(check_symbol(&cdef.name, s)?),
            (ColumnType::Bytes, FieldValue::Str(s)) => {
                line.var_bytes += s.len();
                Value::Bytes(s.as_bytes())
            }
            _ => return Err(mismatch(def, col, &value, text)),
        };
        builder.set(col, v);
        Ok(())
    }
}

/// The error for a value whose kind the column's type does not take.
fn mismatch(def: &TableDef, col: usize, value: &FieldValue, text: &[u8]) -> String {
    let cdef = &def.columns[col];
    let shown = if text.is_empty() {
        String::new()
    } else {
        format!(" '{}'", lossy(text))
    };
    let hint = match (cdef.ty, value) {
        (ColumnType::I64 | ColumnType::I32, FieldValue::F64(_)) => " (write integers as 123i)",
        (ColumnType::Timestamp, _) => {
            " (write timestamps as 123t for microseconds or 123n for nanoseconds)"
        }
        (ColumnType::Str | ColumnType::Symbol | ColumnType::Bytes, _) => {
            " (write strings in double quotes)"
        }
        _ => "",
    };
    format!(
        "column '{}' in table '{}' is {} and cannot take {}{shown}{hint}",
        cdef.name,
        def.name,
        cdef.ty.name(),
        value.kind()
    )
}

/// After a trailing timestamp token: only spaces may follow before the line
/// end. `Ok(None)` when more bytes are needed.
fn after_timestamp(buf: &[u8], t: Token, complete: bool) -> Result<Option<usize>, String> {
    let mut i = t.end;
    if let Stop::At(b' ', at) = t.stop {
        i = skip_spaces(buf, at + 1);
    }
    match scan::eol_at(buf, i, complete) {
        Some(Stop::Eol { next, .. }) => Ok(Some(next)),
        Some(_) => Ok(None),
        None => Err(format!(
            "unexpected text after the timestamp: '{}'",
            lossy(&buf[i..buf.len().min(i + 32)])
        )),
    }
}

/// The trailing timestamp in ns: `precision` units, or ns with an `n`
/// suffix, or µs with a `t` suffix.
fn trailing_timestamp(t: &[u8], precision: Precision) -> Result<i64, String> {
    let (digits, unit_ns) = match t.last() {
        Some(b'n') => (&t[..t.len() - 1], 1),
        Some(b't') => (&t[..t.len() - 1], 1_000),
        _ => (t, precision.nanos()),
    };
    let v = scan::parse_i64(digits)
        .ok_or_else(|| format!("bad timestamp '{}': expected an integer", lossy(t)))?;
    let ns = v.checked_mul(unit_ns).ok_or_else(|| {
        format!(
            "timestamp '{}' is out of range in nanoseconds (precision {})",
            lossy(t),
            precision.name()
        )
    })?;
    check_timestamp(ns).map_err(|why| format!("timestamp '{}' {why}", lossy(t)))
}

/// Whether `ns` lies in `TIMESTAMP_NS_MIN ..= TIMESTAMP_NS_MAX`; `Err`
/// completes a sentence naming the value.
fn check_timestamp(ns: i64) -> Result<i64, String> {
    if (TIMESTAMP_NS_MIN..=TIMESTAMP_NS_MAX).contains(&ns) {
        Ok(ns)
    } else {
        Err(format!(
            "is outside the accepted range {TIMESTAMP_RANGE_TEXT} ({ns} ns since the epoch)"
        ))
    }
}

/// The first C0 control character or DEL in `b`, with its index.
#[inline]
fn control_byte(b: &[u8]) -> Option<(usize, u8)> {
    b.iter()
        .position(|&c| c < 0x20 || c == 0x7f)
        .map(|i| (i, b[i]))
}

/// A symbol is an identifier (kdb+'s sym): printed in logs, query results
/// and filters, so control characters (NUL above all) are refused.
#[inline]
fn check_symbol<'a>(column: &str, s: &'a str) -> Result<&'a str, String> {
    match control_byte(s.as_bytes()) {
        None => Ok(s),
        Some((at, b)) => Err(format!(
            "symbol '{column}' holds a control character (byte 0x{b:02x} at byte {at} of '{}'); \
             symbols may not hold control characters",
            lossy(s.as_bytes())
        )),
    }
}

/// A string may hold any UTF-8 text but NUL: PostgreSQL's text type (what
/// psql, psycopg and JDBC receive) cannot carry it, and C clients would cut
/// the value there.
#[inline]
fn check_string<'a>(column: &str, s: &'a str) -> Result<&'a str, String> {
    match s.bytes().position(|b| b == 0) {
        None => Ok(s),
        Some(at) => Err(format!(
            "string '{column}' holds a NUL byte (at byte {at} of the value); strings may hold \
             any UTF-8 text but NUL"
        )),
    }
}

/// Where a field's value text is in the buffer.
#[derive(Clone, Copy)]
enum RawValue {
    /// Content between the quotes, and whether it holds escapes.
    Quoted(usize, usize, bool),
    Plain(usize, usize),
}

/// What parsing one line tracks besides the builder.
struct LineState {
    /// Schema index of the table.
    t: usize,
    /// Index into `IlpBatcher::open`.
    slot: usize,
    /// Keys seen so far (tags and fields), the column-guess position.
    keys: usize,
    /// String bytes added by this line, counted once the row is kept.
    var_bytes: usize,
}

fn check_unset(builder: &BatchBuilder, def: &TableDef, col: usize) -> Result<(), String> {
    if builder.is_set(col) {
        return Err(format!(
            "column '{}' is set twice in one line",
            def.columns[col].name
        ));
    }
    Ok(())
}

fn skip_spaces(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && buf[i] == b' ' {
        i += 1;
    }
    i
}

/// Byte equality for short names, inlined: cheaper than a `memcmp` call
/// for the few bytes table and column names have.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Bytes from the line as text for an error message: invalid UTF-8 is
/// replaced and control characters are written `\xNN`, so a message never
/// carries a raw NUL or line break into a log or a terminal.
fn lossy(b: &[u8]) -> String {
    let text = String::from_utf8_lossy(b);
    if control_byte(b).is_none() {
        return text.into_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if (c as u32) < 0x20 || c == '\x7f' {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

#[cfg(test)]
mod tests;
