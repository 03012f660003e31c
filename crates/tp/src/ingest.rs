//! ILP text → a validated update. A request is all or nothing: any bad line
//! rejects the whole request and names the line and the reason.

use crate::error::TpError;
use tickdb_core::{Batch, Schema};
use tickdb_ilp::{IlpBatcher, IlpError, IlpOptions, Precision};

/// Default bound on one ILP line.
pub const LINE_BYTES_MAX: usize = 64 * 1024;
/// Default bound on one HTTP write request body.
pub const REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;

pub fn line_error(e: IlpError) -> TpError {
    match e {
        IlpError::Line { line, reason } => TpError::BadLine { line, reason },
        #[allow(unreachable_patterns)]
        other => TpError::BadInput(other.to_string()),
    }
}

/// Whether a rejected line names a table or column the schema lacks: what
/// `--ilp-auto-create` creates (`Tickerplant::auto_create`).
pub fn names_unknown(e: &TpError) -> bool {
    matches!(e, TpError::BadLine { reason, .. }
        if reason.starts_with("unknown table") || reason.starts_with("unknown column"))
}

/// Parses a whole request body. A last line without a newline counts.
pub fn parse_request(
    schema: &Schema,
    body: &[u8],
    precision: Precision,
    line_bytes_max: usize,
) -> Result<Vec<Batch>, TpError> {
    let opts = IlpOptions {
        precision,
        now_ns: crate::now_ns(),
        line_bytes_max,
    };
    let mut batcher = IlpBatcher::new(schema, opts);
    let (consumed, lines, err) = batcher.push_buffer(body, 1);
    if let Some(e) = err {
        return Err(line_error(e));
    }
    let rest = &body[consumed..];
    if !rest.is_empty() {
        let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
        if rest.len() > line_bytes_max {
            return Err(TpError::BadLine {
                line: lines + 1,
                reason: format!(
                    "line is {} bytes, over the bound of {line_bytes_max} (--line-bytes-max)",
                    rest.len()
                ),
            });
        }
        batcher.push_line(rest, lines + 1).map_err(line_error)?;
    }
    Ok(batcher.finish())
}
