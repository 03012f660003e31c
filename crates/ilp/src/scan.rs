//! Byte-level scanning of InfluxDB line protocol: finding the end of a token
//! with its escapes, quoted strings, line ends, and turning value text into
//! typed values. Nothing here allocates; unescaping writes into a buffer the
//! caller reuses.

/// How a scanned token ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// At one of the requested stop bytes, found at this index.
    At(u8, usize),
    /// At the end of the line: its content ends at `end`, the next line
    /// starts at `next` (past `\n` or `\r\n`).
    Eol { end: usize, next: usize },
    /// The buffer ended before the token did and more bytes may follow.
    More,
}

/// A token: `buf[start..end]`, with `escaped` set when it holds a backslash
/// escape (so it must be unescaped before use).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Token {
    pub end: usize,
    pub escaped: bool,
    pub stop: Stop,
}

/// A 256-entry table of the bytes a scan must look at: the stop bytes plus
/// backslash, `\n` and `\r`, which are always special.
pub(crate) type ByteSet = [bool; 256];

pub(crate) const fn byte_set(stops: &[u8]) -> ByteSet {
    let mut t = [false; 256];
    t[b'\\' as usize] = true;
    t[b'\n' as usize] = true;
    t[b'\r' as usize] = true;
    let mut i = 0;
    while i < stops.len() {
        t[stops[i] as usize] = true;
        i += 1;
    }
    t
}

/// Measurement: ends at a comma (tags follow) or a space (fields follow).
pub(crate) const MEASUREMENT_STOPS: ByteSet = byte_set(b", ");
/// Tag keys and field keys: end at `=`; a comma or space there is an error.
pub(crate) const KEY_STOPS: ByteSet = byte_set(b"=, ");
/// Tag values and unquoted field values.
pub(crate) const VALUE_STOPS: ByteSet = byte_set(b", ");
/// The trailing timestamp.
pub(crate) const SPACE_STOPS: ByteSet = byte_set(b" ");

/// Scans an unquoted token starting at `i`. A backslash escapes the byte
/// after it (even a newline, which the QuestDB clients escape that way).
/// With `complete`, the end of `buf` is the end of the line; otherwise it
/// means more bytes may come.
#[inline]
pub(crate) fn scan(buf: &[u8], mut i: usize, complete: bool, stops: &ByteSet) -> Token {
    let mut escaped = false;
    while i < buf.len() {
        let b = buf[i];
        if !stops[b as usize] {
            i += 1;
            continue;
        }
        match b {
            b'\\' => {
                if i + 1 < buf.len() {
                    escaped = true;
                    i += 2;
                } else if complete {
                    // A lone backslash at the very end is kept literally.
                    i += 1;
                } else {
                    return Token {
                        end: i,
                        escaped,
                        stop: Stop::More,
                    };
                }
            }
            b'\n' => {
                return Token {
                    end: i,
                    escaped,
                    stop: Stop::Eol {
                        end: i,
                        next: i + 1,
                    },
                }
            }
            b'\r' => match eol_at_cr(buf, i, complete) {
                Some(stop) => {
                    return Token {
                        end: i,
                        escaped,
                        stop,
                    }
                }
                None => i += 1,
            },
            _ => {
                return Token {
                    end: i,
                    escaped,
                    stop: Stop::At(b, i),
                }
            }
        }
    }
    Token {
        end: i,
        escaped,
        stop: if complete {
            Stop::Eol { end: i, next: i }
        } else {
            Stop::More
        },
    }
}

/// At a `\r` at index `i`: `\r\n` (or `\r` at the very end of a complete
/// line) ends the line; a lone `\r` inside a line is an ordinary byte (None).
#[inline]
fn eol_at_cr(buf: &[u8], i: usize, complete: bool) -> Option<Stop> {
    if i + 1 < buf.len() {
        if buf[i + 1] == b'\n' {
            Some(Stop::Eol {
                end: i,
                next: i + 2,
            })
        } else {
            None
        }
    } else if complete {
        Some(Stop::Eol {
            end: i,
            next: i + 1,
        })
    } else {
        Some(Stop::More)
    }
}

/// Where the line-end bytes at `i` are: returns the `Stop` if `i` is at the
/// end of the line (`\n`, `\r\n`, or the end of a complete buffer).
#[inline]
pub(crate) fn eol_at(buf: &[u8], i: usize, complete: bool) -> Option<Stop> {
    if i >= buf.len() {
        return Some(if complete {
            Stop::Eol { end: i, next: i }
        } else {
            Stop::More
        });
    }
    match buf[i] {
        b'\n' => Some(Stop::Eol {
            end: i,
            next: i + 1,
        }),
        b'\r' => eol_at_cr(buf, i, complete),
        _ => None,
    }
}

/// Result of scanning a quoted string whose opening quote is at `i - 1`.
pub(crate) enum Quoted {
    /// Content is `buf[start..end]`; the closing quote is at `end`.
    Done { end: usize, escaped: bool },
    /// The buffer ended inside the string.
    Unterminated,
}

/// Scans a double-quoted string's content from `i`. Raw newlines inside are
/// allowed (QuestDB accepts them); `\"` and `\\` are escapes.
#[inline]
pub(crate) fn scan_quoted(buf: &[u8], mut i: usize) -> Quoted {
    let mut escaped = false;
    while i < buf.len() {
        match buf[i] {
            b'"' => return Quoted::Done { end: i, escaped },
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Quoted::Unterminated
}

/// Unescapes an unquoted token: `\X` becomes `X` for the bytes the line
/// protocol escapes (comma, space, `=`, backslash, newline, CR, quote);
/// any other backslash is kept as it is, as InfluxDB does.
#[inline]
pub(crate) fn unescape_unquoted<'a>(
    src: &'a [u8],
    escaped: bool,
    out: &'a mut Vec<u8>,
) -> &'a [u8] {
    if !escaped {
        return src;
    }
    out.clear();
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b == b'\\' && i + 1 < src.len() {
            let n = src[i + 1];
            if matches!(n, b',' | b' ' | b'=' | b'\\' | b'\n' | b'\r' | b'"') {
                out.push(n);
                i += 2;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    out
}

/// Unescapes a quoted string's content: `\"`, `\\`, and a backslash before
/// a newline or CR (how the QuestDB clients write them) drop the backslash;
/// any other backslash is kept.
#[inline]
pub(crate) fn unescape_quoted<'a>(src: &'a [u8], escaped: bool, out: &'a mut Vec<u8>) -> &'a [u8] {
    if !escaped {
        return src;
    }
    out.clear();
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b == b'\\' && i + 1 < src.len() {
            let n = src[i + 1];
            if matches!(n, b'"' | b'\\' | b'\n' | b'\r') {
                out.push(n);
                i += 2;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    out
}

/// A field value as written on the line, before it meets a column type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FieldValue<'a> {
    F64(f64),
    /// `123i`
    Int(i64),
    /// `123u`
    UInt(u64),
    Bool(bool),
    Str(&'a str),
    /// `123t`: microseconds since the epoch.
    TsMicros(i64),
    /// `123n`: nanoseconds since the epoch.
    TsNanos(i64),
}

impl FieldValue<'_> {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            FieldValue::F64(_) => "a float",
            FieldValue::Int(_) => "an integer",
            FieldValue::UInt(_) => "an unsigned integer",
            FieldValue::Bool(_) => "a boolean",
            FieldValue::Str(_) => "a string",
            FieldValue::TsMicros(_) => "a timestamp (t, microseconds)",
            FieldValue::TsNanos(_) => "a timestamp (n, nanoseconds)",
        }
    }
}

/// Parses an optionally signed decimal integer with overflow checks.
#[inline]
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    // Leading zeros do not count against the digit bound.
    let zeros = digits.iter().take_while(|&&d| d == b'0').count();
    let digits = &digits[zeros.min(digits.len() - 1)..];
    if digits.len() > 20 {
        return None;
    }
    if digits.len() <= 19 {
        // 19 digits fit a u64 without overflow: skip the checked arithmetic
        // per digit (this is every realistic timestamp and size) and check
        // the range once.
        let mut v: u64 = 0;
        let mut rest = digits;
        while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
            v = v * 100_000_000 + parse_8_digits(*chunk)?;
            rest = tail;
        }
        for &d in rest {
            if !d.is_ascii_digit() {
                return None;
            }
            v = v * 10 + (d - b'0') as u64;
        }
        return if neg {
            if v <= i64::MAX as u64 + 1 {
                Some((v as i64).wrapping_neg())
            } else {
                None
            }
        } else {
            i64::try_from(v).ok()
        };
    }
    // Accumulate negatively so that i64::MIN parses.
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub((d - b'0') as i64)?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// Eight ASCII digits to their value in a few multiplications (the SWAR
/// method simdjson uses), or `None` if any byte is not a digit. Nanosecond
/// timestamps have 19 digits, so this halves the trailing timestamp's cost.
#[inline]
fn parse_8_digits(chunk: [u8; 8]) -> Option<u64> {
    let v = u64::from_le_bytes(chunk);
    // Each byte is a digit iff its high nibble is 3 and adding 6 keeps it so.
    if (v & v.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) != 0x3030_3030_3030_3030
    {
        return None;
    }
    let mut v = v - 0x3030_3030_3030_3030;
    v = (v * 10) + (v >> 8);
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 0x000F_4240_0000_0064;
    const MUL2: u64 = 0x0000_2710_0000_0001;
    Some(
        ((v & MASK)
            .wrapping_mul(MUL1)
            .wrapping_add(((v >> 16) & MASK).wrapping_mul(MUL2)))
            >> 32,
    )
}

#[inline]
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in s {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(v)
}

fn is_int_text(s: &[u8]) -> bool {
    let digits = match s.first() {
        Some(b'-') | Some(b'+') => &s[1..],
        _ => s,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// Parses an unquoted field value. `Err` holds the reason.
pub(crate) fn parse_unquoted(v: &[u8]) -> Result<FieldValue<'static>, &'static str> {
    match v {
        b"t" | b"T" | b"true" | b"True" | b"TRUE" => return Ok(FieldValue::Bool(true)),
        b"f" | b"F" | b"false" | b"False" | b"FALSE" => return Ok(FieldValue::Bool(false)),
        _ => {}
    }
    let Some((&last, body)) = v.split_last() else {
        return Err("empty value");
    };
    match last {
        b'i' if is_int_text(body) => {
            return parse_i64(body)
                .map(FieldValue::Int)
                .ok_or("integer out of the i64 range")
        }
        b'u' if is_int_text(body) => {
            if body.first() == Some(&b'-') {
                return Err("unsigned integer is negative");
            }
            let body = body.strip_prefix(b"+").unwrap_or(body);
            return parse_u64(body)
                .map(FieldValue::UInt)
                .ok_or("unsigned integer out of the u64 range");
        }
        b't' if is_int_text(body) => {
            return parse_i64(body)
                .map(FieldValue::TsMicros)
                .ok_or("timestamp out of the i64 range")
        }
        b'n' if is_int_text(body) => {
            return parse_i64(body)
                .map(FieldValue::TsNanos)
                .ok_or("timestamp out of the i64 range")
        }
        b'i' | b'u' if body.is_empty() || !body.iter().any(u8::is_ascii_alphabetic) => {
            return Err("bad integer")
        }
        _ => {}
    }
    parse_f64(v).map(FieldValue::F64)
}

/// Parses a float the way QuestDB and InfluxDB write them: decimal or
/// exponent notation, and `NaN`, `Infinity`, `-Infinity` (any case, also
/// `inf`). Rust's parser does the work after a cheap character check.
#[inline]
pub(crate) fn parse_f64(v: &[u8]) -> Result<f64, &'static str> {
    let first = v[0];
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.' | b'N' | b'n' | b'I' | b'i'))
    {
        return Err("not a number, integer (123i), boolean or quoted string");
    }
    if let Some(x) = parse_f64_fast(v) {
        return Ok(x);
    }
    // A non-UTF-8 token cannot parse as a float.
    let s = std::str::from_utf8(v).map_err(|_| "not a number")?;
    s.parse::<f64>()
        .map_err(|_| "not a number, integer (123i), boolean or quoted string")
}

/// Exact powers of ten that an f64 holds without rounding.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The common case, `[-]digits[.digits]` with at most 15 significant
/// digits, without the general parser: the mantissa and the power of ten are
/// both exact in an f64, so one division rounds correctly (Clinger's fast
/// path). `None` sends anything else to the general parser.
#[inline]
fn parse_f64_fast(v: &[u8]) -> Option<f64> {
    let (neg, s) = match v.first() {
        Some(b'-') => (true, &v[1..]),
        _ => (false, v),
    };
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut frac_digits = 0usize;
    let mut seen_dot = false;
    let mut digits = 0usize;
    for &b in s {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + (b - b'0') as u64;
                digits += 1;
                if seen_dot {
                    frac_digits += 1;
                }
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => return None,
        }
    }
    if digits == 0 || digits > 15 {
        return None;
    }
    let x = mantissa as f64 / POW10[frac_digits];
    Some(if neg { -x } else { x })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_with_bounds() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"-00000000000000000009"), Some(-9));
        assert_eq!(
            parse_i64(b"1700000000000000000"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(parse_i64(b"9999999999999999999"), None);
        assert_eq!(parse_i64(b"-"), None);
        assert_eq!(parse_i64(b"1a"), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }

    proptest::proptest! {
        #[test]
        fn integer_parsing_matches_std(n in proptest::prelude::any::<i64>(), pad in 0usize..3, junk in 0usize..30) {
            let mut text = format!("{n}");
            if pad > 0 {
                let at = usize::from(n < 0);
                text.insert_str(at, &"0".repeat(pad));
            }
            proptest::prop_assert_eq!(parse_i64(text.as_bytes()), Some(n));
            // Any one non-digit byte makes it fail.
            let mut bytes = text.into_bytes();
            let at = junk % bytes.len();
            if bytes[at].is_ascii_digit() {
                bytes[at] = b':';
                proptest::prop_assert_eq!(parse_i64(&bytes), None);
                bytes[at] = b'/';
                proptest::prop_assert_eq!(parse_i64(&bytes), None);
            }
        }
    }

    #[test]
    fn eight_digit_chunks() {
        assert_eq!(parse_8_digits(*b"12345678"), Some(12_345_678));
        assert_eq!(parse_8_digits(*b"00000000"), Some(0));
        assert_eq!(parse_8_digits(*b"99999999"), Some(99_999_999));
        for bad in [
            *b"1234567a",
            *b"/2345678",
            *b"1234:678",
            *b" 2345678",
            *b"\xff2345678",
        ] {
            assert_eq!(parse_8_digits(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn values_classify() {
        assert_eq!(parse_unquoted(b"1.5"), Ok(FieldValue::F64(1.5)));
        assert_eq!(parse_unquoted(b"1e3"), Ok(FieldValue::F64(1000.0)));
        assert_eq!(parse_unquoted(b"-0.0"), Ok(FieldValue::F64(-0.0)));
        assert_eq!(parse_unquoted(b"5"), Ok(FieldValue::F64(5.0)));
        assert!(matches!(parse_unquoted(b"NaN"), Ok(FieldValue::F64(x)) if x.is_nan()));
        assert_eq!(
            parse_unquoted(b"Infinity"),
            Ok(FieldValue::F64(f64::INFINITY))
        );
        assert_eq!(
            parse_unquoted(b"-Infinity"),
            Ok(FieldValue::F64(f64::NEG_INFINITY))
        );
        assert_eq!(parse_unquoted(b"12i"), Ok(FieldValue::Int(12)));
        assert_eq!(parse_unquoted(b"-12i"), Ok(FieldValue::Int(-12)));
        assert_eq!(parse_unquoted(b"12u"), Ok(FieldValue::UInt(12)));
        assert_eq!(parse_unquoted(b"12t"), Ok(FieldValue::TsMicros(12)));
        assert_eq!(parse_unquoted(b"12n"), Ok(FieldValue::TsNanos(12)));
        assert_eq!(parse_unquoted(b"t"), Ok(FieldValue::Bool(true)));
        assert_eq!(parse_unquoted(b"FALSE"), Ok(FieldValue::Bool(false)));
        assert!(parse_unquoted(b"-1u").is_err());
        assert!(parse_unquoted(b"i").is_err());
        assert!(parse_unquoted(b"abc").is_err());
        assert!(parse_unquoted(b"1.5i").is_err());
        assert!(parse_unquoted(b"99999999999999999999i").is_err());
    }

    #[test]
    fn fast_float_path_matches_the_general_parser() {
        for t in [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "1.5",
            "10.75",
            "123456789012345",
            "0.1",
            "0.3",
            "99999.99999",
            "-1234.5678",
            "5.",
            ".5",
            "1.000000000000001",
            "3.141592653589793",
        ] {
            let want: f64 = t.parse().unwrap();
            let got = parse_f64(t.as_bytes()).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{t}");
        }
        assert_eq!(parse_f64_fast(b"1.2.3"), None);
        assert_eq!(parse_f64_fast(b"."), None);
        assert_eq!(parse_f64_fast(b"-"), None);
    }

    #[test]
    fn unescaping() {
        let mut out = Vec::new();
        assert_eq!(
            unescape_unquoted(br"a\ b\,c\=d\\e\x", true, &mut out),
            b"a b,c=d\\e\\x"
        );
        assert_eq!(
            unescape_quoted(br#"say \"hi\" \\ \n"#, true, &mut out),
            br#"say "hi" \ \n"#
        );
    }
}
