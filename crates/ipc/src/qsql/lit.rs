//! Literals: reading q's atoms of the subset and writing them as SQL.

use super::lex::{Tok, Token};
use super::{nyi, QsqlError};

/// A q atom of the subset, already in the form SQL wants.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lit {
    /// A symbol or a string: both are SQL strings (symbol columns read as
    /// strings).
    Text(String),
    Long(i64),
    Float(f64),
    Bool(bool),
    /// RFC 3339 text with `Z`, for `TIMESTAMP '...'`.
    Timestamp(String),
}

impl Lit {
    pub(super) fn sql(&self) -> String {
        match self {
            Lit::Text(s) => quote_str(s),
            Lit::Long(v) => v.to_string(),
            // Debug keeps a `.0` or an exponent, so SQL reads a float.
            Lit::Float(v) => format!("{v:?}"),
            Lit::Bool(b) => b.to_string(),
            Lit::Timestamp(t) => format!("TIMESTAMP '{t}'"),
        }
    }
}

/// A SQL string literal.
pub(super) fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn bad(at: usize, text: &str) -> QsqlError {
    QsqlError::Parse {
        at,
        why: format!("bad literal {text}"),
    }
}

/// A single-token literal: a number-like run, a string, or one symbol.
pub(super) fn lit(t: &Token) -> Result<Lit, QsqlError> {
    match &t.tok {
        Tok::Num(s) => num(s, t.at),
        Tok::Str(s) => Ok(Lit::Text(s.clone())),
        Tok::Syms(v) if v.len() == 1 => Ok(Lit::Text(v.concat())),
        _ => Err(nyi()),
    }
}

/// Reads a number-like run. Valid q literals of types outside the subset
/// (shorts, reals, months, times, timespans, nulls, infinities, boolean
/// vectors) are `Nyi`; text that is no q literal at all is `Parse`.
pub(super) fn num(s: &str, at: usize) -> Result<Lit, QsqlError> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    if let Some((date, time)) = body.split_once('D') {
        if neg || !date.contains('.') {
            // A negative timestamp is not in the subset; `0D09:30` is a timespan.
            return if date.bytes().all(|b| b.is_ascii_digit()) {
                Err(nyi())
            } else {
                Err(bad(at, s))
            };
        }
        let d = ymd(date).ok_or_else(|| bad(at, s))?;
        let t = hms(time).ok_or_else(|| bad(at, s))?;
        return Ok(Lit::Timestamp(format!("{d}T{t}Z")));
    }
    if body.matches('.').count() == 2 {
        if neg {
            return Err(bad(at, s));
        }
        let d = ymd(body).ok_or_else(|| bad(at, s))?;
        return Ok(Lit::Timestamp(format!("{d}T00:00:00Z")));
    }
    let lower = body.to_ascii_lowercase();
    if lower.starts_with("0n") || lower.starts_with("0w") || is_temporal(body) {
        return Err(nyi());
    }
    // A trailing letter is a type suffix (`5j`, `1.5f`, `1e` is a real).
    let (digits, suffix) = match body.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&body[..i], Some(c)),
        _ => (body, None),
    };
    let plain_int = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    let signed = || {
        if neg {
            format!("-{digits}")
        } else {
            digits.to_string()
        }
    };
    match suffix {
        Some('b') if plain_int && !neg => match digits {
            "0" => Ok(Lit::Bool(false)),
            "1" => Ok(Lit::Bool(true)),
            _ if digits.bytes().all(|b| b == b'0' || b == b'1') => Err(nyi()),
            _ => Err(bad(at, s)),
        },
        Some('j') | None if plain_int => match signed().parse::<i64>() {
            // q's long null is the least long.
            Ok(i64::MIN) => Err(nyi()),
            Ok(v) => Ok(Lit::Long(v)),
            Err(_) => Err(bad(at, s)),
        },
        Some('i') if plain_int => match signed().parse::<i32>() {
            Ok(i32::MIN) => Err(nyi()),
            Ok(v) => Ok(Lit::Long(i64::from(v))),
            Err(_) => Err(bad(at, s)),
        },
        Some('f') | None => float(&signed()).ok_or_else(|| bad(at, s)),
        Some('h' | 'e' | 'x' | 'm' | 'n' | 'u' | 'v' | 't' | 'z' | 'd' | 'p' | 'c' | 'g' | 's')
            if float(digits).is_some() || is_temporal(digits) =>
        {
            Err(nyi())
        }
        _ => Err(bad(at, s)),
    }
}

/// Times and minutes (`09:30`, `09:30:00.000`): q types outside the subset.
fn is_temporal(s: &str) -> bool {
    s.contains(':')
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'.')
}

/// A decimal float: digits, at most one `.`, an optional exponent. Checked
/// by hand first because Rust's parser also takes `inf` and `nan`.
fn float(s: &str) -> Option<Lit> {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (mant, exp) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (body, None),
    };
    let mant_ok = mant.bytes().any(|b| b.is_ascii_digit())
        && mant.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && mant.matches('.').count() <= 1;
    let exp_ok = exp.is_none_or(|e| {
        let d = e.strip_prefix('-').unwrap_or(e);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    });
    if !(mant_ok && exp_ok) {
        return None;
    }
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(Lit::Float)
}

fn fixed(s: &str, n: usize) -> Option<u32> {
    if s.len() == n && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// `YYYY.MM.DD` to `YYYY-MM-DD`, checking the calendar.
fn ymd(s: &str) -> Option<String> {
    let mut it = s.split('.');
    let y = fixed(it.next()?, 4)?;
    let m = fixed(it.next()?, 2)?;
    let d = fixed(it.next()?, 2)?;
    if it.next().is_some() {
        return None;
    }
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    (1..=days)
        .contains(&d)
        .then(|| format!("{y:04}-{m:02}-{d:02}"))
}

/// `hh:mm:ss[.f]` (1 to 9 fraction digits) to `hh:mm:ss[.fffffffff]`.
fn hms(s: &str) -> Option<String> {
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (s, None),
    };
    let mut it = whole.split(':');
    let h = fixed(it.next()?, 2)?;
    let m = fixed(it.next()?, 2)?;
    let sec = fixed(it.next()?, 2)?;
    if it.next().is_some() || h > 23 || m > 59 || sec > 59 {
        return None;
    }
    let mut out = format!("{h:02}:{m:02}:{sec:02}");
    if let Some(f) = frac {
        if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        out.push('.');
        out.push_str(f);
        out.extend(std::iter::repeat_n('0', 9 - f.len()));
    }
    Some(out)
}
