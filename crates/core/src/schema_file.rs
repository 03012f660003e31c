//! Reading a schema file from disk, and describing TOML errors, without
//! ever repeating what the file holds.
//!
//! `tickdb up --schema PATH` runs with the operator's privileges: a mistyped
//! path that points at a secret (`/etc/shadow`, a credentials file) must not
//! end up in the error on the terminal or in a log. So every error says where
//! (file, line, column) and what kind of problem it is, in words of our own:
//! TOML syntax errors come from the parser's fixed vocabulary, and the serde
//! errors of the structural pass (which quote offending values and keys) are
//! rewritten into fixed phrases. The other half of the danger is a path that
//! is not a file at all: `/dev/zero` never ends and a FIFO never opens, so
//! only regular files are read, and never more than `SCHEMA_FILE_BYTES_MAX`.

use crate::error::{CoreError, Result};
use std::io::Read;
use std::ops::Range;
use std::path::Path;

/// Largest schema file read. A schema of a thousand tables of a hundred
/// columns is well under it; it bounds what `--schema` can make us allocate,
/// and the schema history the journal keeps holds the text of each schema.
pub const SCHEMA_FILE_BYTES_MAX: usize = 1024 * 1024;

fn schema_err(path: &Path, reason: impl Into<String>) -> CoreError {
    CoreError::Schema {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Reads the schema file at `path` as UTF-8 text: regular files only (after
/// following symlinks), at most `SCHEMA_FILE_BYTES_MAX` bytes.
pub fn read_schema_file(path: &Path) -> Result<String> {
    // stat first: opening a FIFO for reading blocks until a writer appears.
    let meta = std::fs::metadata(path)
        .map_err(|e| schema_err(path, format!("cannot read the file: {}", io_kind(&e))))?;
    if !meta.is_file() {
        return Err(schema_err(
            path,
            format!(
                "not a regular file ({}): a schema must be a TOML file",
                file_kind(&meta)
            ),
        ));
    }
    let file = open_nonblocking(path)
        .map_err(|e| schema_err(path, format!("cannot open the file: {}", io_kind(&e))))?;
    // Check again on the open descriptor: the path may have been swapped
    // for something else between the stat and the open.
    let meta = file
        .metadata()
        .map_err(|e| schema_err(path, format!("cannot read the file: {}", io_kind(&e))))?;
    if !meta.is_file() {
        return Err(schema_err(
            path,
            format!("not a regular file ({})", file_kind(&meta)),
        ));
    }
    if meta.len() > SCHEMA_FILE_BYTES_MAX as u64 {
        return Err(too_large(path, meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // One byte more than the bound tells "exactly at the bound" from "grew
    // past it since the stat".
    file.take(SCHEMA_FILE_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| schema_err(path, format!("cannot read the file: {}", io_kind(&e))))?;
    if bytes.len() > SCHEMA_FILE_BYTES_MAX {
        return Err(too_large(path, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        let (line, column) = line_column_bytes(e.as_bytes(), e.utf8_error().valid_up_to());
        schema_err(
            path,
            format!("line {line}, column {column}: not UTF-8 text (a schema is a TOML file)"),
        )
    })
}

fn too_large(path: &Path, bytes: u64) -> CoreError {
    schema_err(
        path,
        format!(
            "the file is larger than {SCHEMA_FILE_BYTES_MAX} bytes (SCHEMA_FILE_BYTES_MAX; it has {bytes}): not a schema"
        ),
    )
}

fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Never block in open() on a FIFO that replaced the file after the stat.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    opts.open(path)
}

/// An I/O error in words: the OS's description ("No such file or
/// directory"), which says nothing of the file's contents.
fn io_kind(e: &std::io::Error) -> String {
    e.to_string()
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let ft = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    line_column_bytes(text.as_bytes(), offset)
}

fn line_column_bytes(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    // Count characters, not bytes: UTF-8 continuation bytes do not start one.
    let column = before[line_start..]
        .iter()
        .filter(|b| (**b & 0xC0) != 0x80)
        .count()
        + 1;
    (line, column)
}

/// "line L, column C: " for a span, or "" when the error has none.
pub(crate) fn at(text: &str, span: Option<Range<usize>>) -> String {
    match span {
        Some(s) => {
            let (line, column) = line_column(text, s.start);
            format!("line {line}, column {column}: ")
        }
        None => String::new(),
    }
}

/// A TOML syntax error (the first, schema-agnostic pass). The parser's
/// messages are built from fixed descriptions and the tokens it expected,
/// never from the input, so they are kept.
pub(crate) fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    format!("{}invalid TOML: {}", at(text, e.span()), e.message())
}

/// A structural error (the file is TOML but not a schema). serde's messages
/// quote the offending value (`invalid type: string "..."`) or key
/// (`unknown field `...``); only their fixed parts are kept.
pub(crate) fn structure_error(text: &str, e: &toml::de::Error) -> String {
    let m = e.message();
    let kind = if m.starts_with("unknown field") {
        // "unknown field `k`, expected one of `a`, `b`": the list is ours.
        match m.split_once("`, ") {
            Some((_, expected)) => format!("unknown key; {expected}"),
            None => "unknown key".to_string(),
        }
    } else if let Some(rest) = m.strip_prefix("missing field ") {
        // The name is one of our field names.
        format!("missing key {rest}")
    } else if m.starts_with("invalid type") {
        // "invalid type: <what the file holds>, expected <ours>"
        match m.rsplit_once(", expected ") {
            Some((_, expected)) => format!("wrong type of value, expected {expected}"),
            None => "wrong type of value".to_string(),
        }
    } else if m.starts_with("invalid length") {
        match m.rsplit_once(", expected ") {
            Some((_, expected)) => format!("wrong number of entries, expected {expected}"),
            None => "wrong number of entries".to_string(),
        }
    } else if m.starts_with("duplicate field") || m.starts_with("duplicate key") {
        "a key is given twice".to_string()
    } else {
        "not a valid schema here".to_string()
    };
    format!("{}{kind}", at(text, e.span()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_characters() {
        let t = "ab\ncé d\n";
        assert_eq!(line_column(t, 0), (1, 1));
        assert_eq!(line_column(t, 3), (2, 1));
        // 'd' is byte 7 (é is two bytes) but character 4 of line 2.
        assert_eq!(line_column(t, 7), (2, 4));
        assert_eq!(line_column(t, 100), (3, 1));
    }
}
