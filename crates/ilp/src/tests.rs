use super::*;
use proptest::prelude::*;
use tickdb_core::ColumnData;

const NOW: i64 = 42;

fn opts() -> IlpOptions {
    IlpOptions {
        precision: Precision::Nanos,
        now_ns: NOW,
        line_bytes_max: LINE_BYTES_MAX,
    }
}

fn test_schema() -> Schema {
    Schema::parse(
        r#"
        [[table]]
        name = "trade"
        column = [
          { name = "time", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "price", type = "f64" },
          { name = "size", type = "i64" },
        ]

        [[table]]
        name = "quote"
        column = [
          { name = "time", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "bid", type = "f64" },
          { name = "ask", type = "f64" },
        ]

        [[table]]
        name = "all"
        column = [
          { name = "ts", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "f", type = "f64" },
          { name = "l", type = "i64" },
          { name = "i", type = "i32" },
          { name = "b", type = "bool" },
          { name = "s", type = "string" },
          { name = "raw", type = "bytes" },
          { name = "other_ts", type = "timestamp" },
        ]
        timestamp = "ts"

        [[table]]
        name = "cache"
        kind = "keyed"
        key = ["k1", "k2"]
        column = [
          { name = "time", type = "timestamp" },
          { name = "k1", type = "symbol" },
          { name = "k2", type = "i64" },
          { name = "v", type = "f64" },
        ]

        [[table]]
        name = "ref"
        column = [
          { name = "time", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "exch", type = "symbol" },
          { name = "note", type = "string" },
        ]
        "#,
        "test",
    )
    .unwrap()
}

/// Parses `text` as one request and returns the batches.
fn parse(text: &str) -> Result<Vec<Batch>, IlpError> {
    parse_with(text, opts())
}

fn parse_with(text: &str, o: IlpOptions) -> Result<Vec<Batch>, IlpError> {
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, o);
    let (consumed, lines, err) = b.push_buffer(text.as_bytes(), 1);
    if let Some(e) = err {
        return Err(e);
    }
    if consumed < text.len() {
        b.push_line(&text.as_bytes()[consumed..], lines + 1)?;
    }
    Ok(b.finish())
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

fn col<'a>(batch: &'a Batch, schema_table: &TableDef, name: &str) -> &'a tickdb_core::Column {
    &batch.columns[schema_table.column_index(name).unwrap()]
}

fn one_all(line: &str) -> Batch {
    let mut v = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v.len(), 1);
    v.remove(0)
}

#[test]
fn questdb_client_typical_line() {
    let b = parse("trade,sym=AAPL price=10.75,size=100i 1700000000000000000\n").unwrap();
    assert_eq!(b.len(), 1);
    let b = &b[0];
    assert_eq!(b.table, "trade");
    assert_eq!(b.rows, 1);
    assert_eq!(
        b.columns[0].data,
        ColumnData::Timestamp(vec![1_700_000_000_000_000_000])
    );
    assert_eq!(b.columns[1].data.symbol(0), Some("AAPL"));
    assert_eq!(b.columns[2].data, ColumnData::F64(vec![10.75]));
    assert_eq!(b.columns[3].data, ColumnData::I64(vec![100]));
    assert!(b.columns.iter().all(|c| c.valid.is_none()));
}

#[test]
fn many_lines_many_tables_keep_first_appearance_order() {
    let text = "quote,sym=A bid=1.0,ask=2.0 1\n\
                trade,sym=A price=1.5,size=1i 2\n\
                quote,sym=B bid=3.0,ask=4.0 3\n\
                trade,sym=B size=2i,price=2.5 4\n";
    let b = parse(text).unwrap();
    assert_eq!(
        b.iter().map(|b| b.table.as_str()).collect::<Vec<_>>(),
        ["quote", "trade"]
    );
    assert_eq!(b[0].rows, 2);
    assert_eq!(b[1].rows, 2);
    assert_eq!(b[1].columns[2].data, ColumnData::F64(vec![1.5, 2.5]));
    assert_eq!(b[1].columns[3].data, ColumnData::I64(vec![1, 2]));
    assert_eq!(b[1].columns[0].data, ColumnData::Timestamp(vec![2, 4]));
}

#[test]
fn every_value_type() {
    let s = test_schema();
    let def = s.table("all").unwrap();
    let b = one_all(
        "all,sym=X f=1.5,l=-7i,i=2147483647i,b=t,s=\"hi there\",raw=\"\\\\x\",other_ts=5t 9\n",
    );
    assert_eq!(col(&b, def, "ts").data, ColumnData::Timestamp(vec![9]));
    assert_eq!(col(&b, def, "f").data, ColumnData::F64(vec![1.5]));
    assert_eq!(col(&b, def, "l").data, ColumnData::I64(vec![-7]));
    assert_eq!(col(&b, def, "i").data, ColumnData::I32(vec![i32::MAX]));
    assert_eq!(col(&b, def, "b").data, ColumnData::Bool(vec![true]));
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 8],
            data: b"hi there".to_vec()
        }
    );
    assert_eq!(
        col(&b, def, "raw").data,
        ColumnData::Bytes {
            offsets: vec![0, 2],
            data: b"\\x".to_vec()
        }
    );
    assert_eq!(
        col(&b, def, "other_ts").data,
        ColumnData::Timestamp(vec![5000])
    );
}

#[test]
fn floats_in_all_spellings() {
    for (text, want) in [
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("1E-2", 0.01),
        ("-0.0", -0.0),
        ("5", 5.0),
        ("Infinity", f64::INFINITY),
        ("-Infinity", f64::NEG_INFINITY),
        ("7i", 7.0),
        ("7u", 7.0),
    ] {
        let b = one_all(&format!("all f={text}\n"));
        let ColumnData::F64(v) = &b.columns[2].data else {
            panic!()
        };
        assert_eq!(v[0], want, "{text}");
        assert_eq!(v[0].is_sign_negative(), want.is_sign_negative(), "{text}");
    }
    let b = one_all("all f=NaN\n");
    let ColumnData::F64(v) = &b.columns[2].data else {
        panic!()
    };
    assert!(v[0].is_nan());
}

#[test]
fn booleans_in_all_spellings() {
    for (text, want) in [
        ("t", true),
        ("T", true),
        ("true", true),
        ("True", true),
        ("TRUE", true),
        ("f", false),
        ("F", false),
        ("false", false),
        ("False", false),
        ("FALSE", false),
    ] {
        let b = one_all(&format!("all b={text}\n"));
        assert_eq!(b.columns[5].data, ColumnData::Bool(vec![want]), "{text}");
    }
    assert!(err("all b=yes\n").contains("bad value 'yes'"));
}

#[test]
fn integers_check_ranges() {
    assert_eq!(
        one_all("all i=-2147483648i\n").columns[4].data,
        ColumnData::I32(vec![i32::MIN])
    );
    let e = err("all i=2147483648i\n");
    assert!(e.contains("out of its range"), "{e}");
    assert_eq!(
        one_all("all l=9223372036854775807u\n").columns[3].data,
        ColumnData::I64(vec![i64::MAX])
    );
    let e = err("all l=9223372036854775808u\n");
    assert!(e.contains("out of its range"), "{e}");
    let e = err("all l=99999999999999999999i\n");
    assert!(e.contains("out of the i64 range"), "{e}");
    let e = err("all l=1.5\n");
    assert_eq!(
        e,
        "line 1: column 'l' in table 'all' is i64 and cannot take a float '1.5' (write integers as 123i)"
    );
    let e = err("all l=5\n");
    assert!(e.contains("cannot take a float"), "{e}");
}

#[test]
fn timestamp_fields() {
    let s = test_schema();
    let def = s.table("all").unwrap();
    let b = one_all("all other_ts=1700000000000001t 1\n");
    assert_eq!(
        col(&b, def, "other_ts").data,
        ColumnData::Timestamp(vec![1_700_000_000_000_001_000])
    );
    let b = one_all("all other_ts=1700000000000000123n 1\n");
    assert_eq!(
        col(&b, def, "other_ts").data,
        ColumnData::Timestamp(vec![1_700_000_000_000_000_123])
    );
    // QuestDB reads an integer into a timestamp column as microseconds.
    let b = one_all("all other_ts=3i 1\n");
    assert_eq!(
        col(&b, def, "other_ts").data,
        ColumnData::Timestamp(vec![3000])
    );
    let e = err("all other_ts=1.0 1\n");
    assert!(e.contains("is timestamp and cannot take a float"), "{e}");
    let e = err("all other_ts=9223372036854775807t\n");
    assert!(e.contains("out of its range in nanoseconds"), "{e}");
    // A timestamp value into a non-timestamp column.
    let e = err("all l=5t\n");
    assert!(e.contains("cannot take a timestamp"), "{e}");
}

#[test]
fn designated_time_column_as_field() {
    let b = one_all("all ts=7t,l=1i\n");
    assert_eq!(b.columns[0].data, ColumnData::Timestamp(vec![7000]));
    let e = err("all ts=7t,l=1i 100\n");
    assert_eq!(
        e,
        "line 1: column 'ts' is set both as a field and by the trailing timestamp"
    );
}

#[test]
fn strings_and_escapes() {
    let s = test_schema();
    let def = s.table("all").unwrap();
    let line = "all s=\"a \\\"quoted\\\" \\\\ back, with = and space\" 1\n";
    let b = one_all(line);
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 35],
            data: b"a \"quoted\" \\ back, with = and space".to_vec()
        }
    );
    // Raw newlines inside a quoted string (QuestDB accepts them), and the
    // clients' backslash-newline.
    let text = "all s=\"two\nlines\" 1\nall s=\"esc\\\nnl\" 2\ntrade,sym=A price=1.0 3\n";
    let b = parse(text).unwrap();
    assert_eq!(
        col(&b[0], def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 9, 15],
            data: b"two\nlinesesc\nnl".to_vec()
        }
    );
    assert_eq!(b[1].rows, 1);
    // An unknown backslash sequence keeps its backslash.
    let b = one_all("all s=\"a\\tb\"\n");
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 4],
            data: b"a\\tb".to_vec()
        }
    );
    // Empty string.
    let b = one_all("all s=\"\"\n");
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 0],
            data: vec![]
        }
    );
    // A string into a symbol column, and a tag into a string column.
    let b = one_all("all sym=\"S1\",s=\"x\"\n");
    assert_eq!(col(&b, def, "sym").data.symbol(0), Some("S1"));
    let b = one_all("all,s=tagtext l=1i\n");
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 7],
            data: b"tagtext".to_vec()
        }
    );
}

#[test]
fn tag_and_measurement_escapes() {
    let schema = Schema::parse(
        r#"
        [[table]]
        name = "t"
        column = [
          { name = "time", type = "timestamp" },
          { name = "sym", type = "symbol" },
          { name = "v", type = "f64" },
        ]
        "#,
        "t",
    )
    .unwrap();
    let mut b = IlpBatcher::new(&schema, opts());
    b.push_line(br"t,sym=a\ b\,c\=d\\e v=1", 1).unwrap();
    // A backslash-newline parses (the clients escape newlines so), but a
    // symbol may not hold a line break: control_characters_in_symbols_are_rejected.
    let e = b.push_line(b"t,sym=new\\\nline v=2", 2).unwrap_err();
    assert!(e.to_string().contains("byte 0x0a"), "{e}");
    let batch = b.finish().remove(0);
    assert_eq!(batch.rows, 1);
    assert_eq!(batch.columns[1].data.symbol(0), Some("a b,c=d\\e"));
    // An escaped measurement that names no table names the unescaped name.
    let mut b = IlpBatcher::new(&schema, opts());
    let e = b.push_line(br"my\ table v=1", 4).unwrap_err();
    assert_eq!(e.to_string(), "line 4: unknown table 'my table'");
}

#[test]
fn errors_carry_line_numbers() {
    let text = "trade,sym=A price=1.0 1\n\ntrade,sym=A prce=1.0 2\n";
    assert_eq!(err(text), "line 3: unknown column 'prce' in table 'trade'");
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    let (consumed, lines, e) = b.push_buffer(text.as_bytes(), 10);
    assert_eq!(consumed, "trade,sym=A price=1.0 1\n\n".len());
    assert_eq!(lines, 2);
    let e = e.unwrap();
    assert_eq!(e.line(), 12);
    assert_eq!(e.reason(), "unknown column 'prce' in table 'trade'");
    assert!(matches!(e, IlpError::Line { line: 12, .. }));
    // The good line before it is kept; nothing of the bad one is.
    assert_eq!(b.rows(), 1);
    let batches = b.finish();
    assert_eq!(batches[0].rows, 1);
}

#[test]
fn malformed_lines() {
    let cases: &[(&str, &str)] = &[
        ("nope price=1.0\n", "unknown table 'nope'"),
        ("trade\n", "has no tags or fields"),
        ("trade 123\n", "field '123' has no '=value'"),
        ("trade price\n", "has no '=value'"),
        ("trade price=\n", "bad value ''"),
        ("trade price=1.0,\n", "empty field name"),
        ("trade ,price=1.0\n", "empty field name"),
        ("trade,sym price=1.0\n", "tag 'sym' has no '=value'"),
        ("trade,sym= price=1.0\n", "tag 'sym' has an empty value"),
        ("trade,=A price=1.0\n", "empty tag name"),
        (",sym=A price=1.0\n", "missing table name"),
        ("trade,sym=A price=1.0 12x\n", "bad timestamp '12x'"),
        (
            "trade,sym=A price=1.0 1 2\n",
            "unexpected text after the timestamp",
        ),
        (
            "trade,sym=A price=1.0,price=2.0\n",
            "column 'price' is set twice in one line",
        ),
        ("trade,sym=A,sym=B price=1.0\n", "column 'sym' is set twice"),
        (
            "trade,price=1 size=1i\n",
            "a tag can only fill a symbol or string column",
        ),
        (
            "trade,sym=A price=\"1.0\"\n",
            "is f64 and cannot take a string",
        ),
        ("trade,sym=A price=t\n", "cannot take a boolean"),
        (
            "trade sym=1.0\n",
            "is symbol and cannot take a float '1.0' (write strings in double quotes)",
        ),
        ("all s=\"abc\n", "no closing quote"),
        ("all s=\"abc\"x\n", "unexpected 'x' after the closing quote"),
        (
            "trade,sym=A price==\x10\x00\x00\x00\x00\x00\x00\x7f?\n",
            "ILP protocol version 2",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with("line 1: "), "{text:?}: {e}");
        assert!(e.contains(want), "{text:?}: got {e:?}, want {want:?}");
    }
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    let e = b.push_line(b"trade,sym=\xff\xfe price=1.0", 1).unwrap_err();
    assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    let e = b.push_line(b"all s=\"\xff\"", 2).unwrap_err();
    assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    assert_eq!(b.rows(), 0);
}

#[test]
fn precision_scales_the_trailing_timestamp() {
    for (p, want) in [
        (Precision::Nanos, 5),
        (Precision::Micros, 5_000),
        (Precision::Millis, 5_000_000),
        (Precision::Seconds, 5_000_000_000),
    ] {
        let o = IlpOptions {
            precision: p,
            ..opts()
        };
        let b = parse_with("trade,sym=A price=1.0 5\n", o).unwrap();
        assert_eq!(
            b[0].columns[0].data,
            ColumnData::Timestamp(vec![want]),
            "{p:?}"
        );
    }
    // Suffixes override the precision.
    let o = IlpOptions {
        precision: Precision::Seconds,
        ..opts()
    };
    let b = parse_with("trade price=1.0 5n\ntrade price=1.0 5t\n", o).unwrap();
    assert_eq!(b[0].columns[0].data, ColumnData::Timestamp(vec![5, 5000]));
    let o = IlpOptions {
        precision: Precision::Seconds,
        ..opts()
    };
    let e = parse_with("trade price=1.0 9223372036854775807\n", o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
    assert_eq!(Precision::parse("n"), Some(Precision::Nanos));
    assert_eq!(Precision::parse("ns"), Some(Precision::Nanos));
    assert_eq!(Precision::parse("u"), Some(Precision::Micros));
    assert_eq!(Precision::parse("us"), Some(Precision::Micros));
    assert_eq!(Precision::parse("ms"), Some(Precision::Millis));
    assert_eq!(Precision::parse("s"), Some(Precision::Seconds));
    assert_eq!(Precision::parse("h"), None);
}

#[test]
fn missing_timestamp_uses_now() {
    let b =
        parse("trade,sym=A price=1.0\ntrade,sym=A price=2.0   \ntrade,sym=B size=1i\n").unwrap();
    assert_eq!(b[0].rows, 3);
    assert_eq!(
        b[0].columns[0].data,
        ColumnData::Timestamp(vec![NOW, NOW, NOW])
    );
    assert_eq!(b[0].columns[2].valid, Some(vec![true, true, false]));
}

#[test]
fn lines_without_fields_are_rejected_where_tags_cannot_fill_the_row() {
    // InfluxDB requires a field in every line: `trade,sym=A 77` would store
    // a trade with no price and no size.
    for text in ["trade,sym=A 77\n", "trade,sym=A\n", "trade,sym=A  \n"] {
        let e = err(text);
        assert!(e.starts_with("line 1: "), "{text:?}: {e}");
        assert!(
            e.contains("line for table 'trade' has tags but no fields"),
            "{text:?}: {e}"
        );
    }
    let e = err("trade,sym=A price=1.0 1\ntrade,sym=B 2\n");
    assert!(e.starts_with("line 2: "), "{e}");
    // A table whose columns tags can fill (symbols and strings besides its
    // time column) takes tag-only lines, as QuestDB's clients write them
    // for symbol-only rows.
    let b = parse("ref,sym=A,exch=X 77\nref,sym=B,exch=Y,note=n\n").unwrap();
    assert_eq!(b[0].rows, 2);
    assert_eq!(b[0].columns[0].data, ColumnData::Timestamp(vec![77, NOW]));
    assert_eq!(b[0].columns[1].data.symbol(0), Some("A"));
    assert_eq!(b[0].columns[2].data.symbol(1), Some("Y"));
}

#[test]
fn control_characters_in_names_are_rejected() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"tra\x00de,sym=A price=1.0",
            "table name 'tra\\x00de' holds a control character (byte 0x00)",
        ),
        (
            b"trade\x01,sym=A price=1.0",
            "table name 'trade\\x01' holds a control character (byte 0x01)",
        ),
        (
            b"trade,s\x00ym=A price=1.0",
            "column name 's\\x00ym' holds a control character (byte 0x00)",
        ),
        (
            b"trade,sym=A pri\x7fce=1.0",
            "column name 'pri\\x7fce' holds a control character (byte 0x7f)",
        ),
        (
            b"trade,sym=A price=1.0,si\tze=1i",
            "column name 'si\\x09ze' holds a control character (byte 0x09)",
        ),
    ];
    let schema = test_schema();
    for (line, want) in cases {
        let mut b = IlpBatcher::new(&schema, opts());
        let e = b.push_line(line, 3).unwrap_err().to_string();
        assert_eq!(e, format!("line 3: {want}"), "{line:?}");
        assert_eq!(b.rows(), 0);
    }
}

#[test]
fn control_characters_in_symbols_are_rejected() {
    let cases: &[(&[u8], &str)] = &[
        (b"trade,sym=A\x00B price=1.0", "byte 0x00"),
        (b"trade,sym=\x00 price=1.0", "byte 0x00"),
        (b"trade,sym=A\x1bB price=1.0", "byte 0x1b"),
        (b"trade,sym=A\tB price=1.0", "byte 0x09"),
        (b"trade,sym=A\x7f price=1.0", "byte 0x7f"),
        // The clients' escaped newline parses, but makes a symbol with a
        // line break in it.
        (b"trade,sym=new\\\nline price=1.0", "byte 0x0a"),
        // A quoted string into a symbol column is a symbol too.
        (b"all sym=\"a\x00b\",l=1i", "byte 0x00"),
        (b"all sym=\"a\rb\",l=1i", "byte 0x0d"),
    ];
    let schema = test_schema();
    for (line, want) in cases {
        let mut b = IlpBatcher::new(&schema, opts());
        let e = b.push_line(line, 1).unwrap_err().to_string();
        assert!(e.starts_with("line 1: symbol 'sym' "), "{line:?}: {e}");
        assert!(e.contains("holds a control character"), "{line:?}: {e}");
        assert!(e.contains(want), "{line:?}: {e}");
        assert!(
            !e.bytes().any(|c| c < 0x20),
            "the message escapes it: {e:?}"
        );
        assert_eq!(b.rows(), 0);
    }
    // Escaped spaces, commas and equals signs are ordinary symbol text.
    let b = parse("trade,sym=A\\ B\\,C\\=D price=1.0\n").unwrap();
    assert_eq!(b[0].columns[1].data.symbol(0), Some("A B,C=D"));
    // Non-ASCII text is not a control character.
    let b = parse("trade,sym=ünï€ price=1.0\n").unwrap();
    assert_eq!(b[0].columns[1].data.symbol(0), Some("ünï€"));
}

#[test]
fn nul_in_strings_is_rejected_other_text_is_kept() {
    let s = test_schema();
    let def = s.table("all").unwrap();
    let e = err("all s=\"a\0b\"\n");
    assert_eq!(
        e,
        "line 1: string 's' holds a NUL byte (at byte 1 of the value); strings may hold any UTF-8 text but NUL"
    );
    // A tag filling a string column follows the string rule.
    let e = err("ref,sym=A,note=x\0y\n");
    assert!(e.contains("string 'note' holds a NUL byte"), "{e}");
    // Tabs, raw newlines and other control characters are string text.
    let b = one_all("all s=\"tab\there\nnext\x01\"\n");
    assert_eq!(
        col(&b, def, "s").data,
        ColumnData::Str {
            offsets: vec![0, 14],
            data: b"tab\there\nnext\x01".to_vec()
        }
    );
    // A bytes column holds binary data: NUL is data there.
    let b = one_all("all raw=\"a\0b\"\n");
    assert_eq!(
        col(&b, def, "raw").data,
        ColumnData::Bytes {
            offsets: vec![0, 3],
            data: b"a\0b".to_vec()
        }
    );
}

#[test]
fn timestamps_outside_the_accepted_range_are_rejected() {
    assert_eq!(TIMESTAMP_NS_MIN, -9_214_560_000_000_000_000);
    assert_eq!(TIMESTAMP_NS_MAX, 9_214_646_399_999_999_999);
    // kdb+'s null (0Np, i64::MIN) and infinities (0Wp, -0Wp) are out.
    for t in [
        i64::MIN,
        -i64::MAX,
        i64::MAX,
        TIMESTAMP_NS_MIN - 1,
        TIMESTAMP_NS_MAX + 1,
    ] {
        for text in [
            format!("trade,sym=A price=1.0 {t}\n"),
            format!("trade,sym=A price=1.0 {t}n\n"),
            format!("all other_ts={t}n\n"),
            format!("all ts={t}n,l=1i\n"),
        ] {
            let e = err(&text);
            assert!(e.starts_with("line 1: "), "{text}: {e}");
            assert!(
                e.contains("outside the accepted range 1678-01-01T00:00:00Z ..= 2261-12-31T23:59:59.999999999Z"),
                "{text}: {e}"
            );
        }
    }
    // Microseconds and other precisions land in the same check.
    let e = err(&format!("all other_ts={}t\n", TIMESTAMP_NS_MIN / 1000 - 1));
    assert!(e.contains("outside the accepted range"), "{e}");
    let e = parse_with(
        "trade,sym=A price=1.0 -9214560001\n",
        IlpOptions {
            precision: Precision::Seconds,
            ..opts()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("outside the accepted range"), "{e}");
    // The bounds themselves are accepted.
    for t in [TIMESTAMP_NS_MIN, -1, 0, TIMESTAMP_NS_MAX] {
        let b = parse(&format!("trade,sym=A price=1.0 {t}\n")).unwrap();
        assert_eq!(b[0].columns[0].data, ColumnData::Timestamp(vec![t]));
        let b = one_all(&format!("all other_ts={t}n\n"));
        assert_eq!(b.columns[8].data, ColumnData::Timestamp(vec![t]));
    }
    let b = parse_with(
        "trade,sym=A price=1.0 -9214560000\n",
        IlpOptions {
            precision: Precision::Seconds,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(
        b[0].columns[0].data,
        ColumnData::Timestamp(vec![TIMESTAMP_NS_MIN])
    );
}

#[test]
fn crlf_comments_blank_lines_and_spaces() {
    let text = "# a comment\r\n\r\n   \n  # indented comment\ntrade,sym=A price=1.0 1\r\ntrade,sym=B  price=2.0  2  \r\ntrade,sym=C price=3.0\r\n";
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    let (consumed, lines, e) = b.push_buffer(text.as_bytes(), 1);
    assert!(e.is_none(), "{e:?}");
    assert_eq!(consumed, text.len());
    assert_eq!(lines, 7);
    let batch = b.finish().remove(0);
    assert_eq!(batch.rows, 3);
    assert_eq!(
        batch.columns[0].data,
        ColumnData::Timestamp(vec![1, 2, NOW])
    );
    assert_eq!(batch.columns[2].data, ColumnData::F64(vec![1.0, 2.0, 3.0]));
    // push_line ignores a trailing CR too.
    let mut b = IlpBatcher::new(&schema, opts());
    b.push_line(b"trade,sym=A price=1.0 9\r", 1).unwrap();
    b.push_line(b"# comment", 2).unwrap();
    b.push_line(b"", 3).unwrap();
    assert_eq!(
        b.finish()[0].columns[0].data,
        ColumnData::Timestamp(vec![9])
    );
}

#[test]
fn push_line_rejects_embedded_newline() {
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    let e = b
        .push_line(b"trade price=1.0\ntrade price=2.0", 5)
        .unwrap_err();
    assert!(
        e.to_string().starts_with("line 5: unexpected newline"),
        "{e}"
    );
    assert_eq!(b.rows(), 0);
}

#[test]
fn keyed_tables_need_every_key_column() {
    let b = parse("cache,k1=A k2=1i,v=1.5\n").unwrap();
    assert_eq!(b[0].rows, 1);
    let e = err("cache,k1=A v=1.5\n");
    assert_eq!(
        e,
        "line 1: keyed table 'cache' needs its key column 'k2' in every line"
    );
    let e = err("cache k2=1i,v=1.5\n");
    assert!(e.contains("key column 'k1'"), "{e}");
}

#[test]
fn partial_lines_wait_for_more_bytes() {
    let schema = test_schema();
    let full = "trade,sym=A price=1.0 1\ntrade,sym=B price=2.0 2\ntrade,sym=C price=3.0 3\n";
    // Feed the stream in every possible split and check the same rows come out.
    for split in 0..=full.len() {
        let mut b = IlpBatcher::new(&schema, opts());
        let mut buf = full.as_bytes()[..split].to_vec();
        let (c, l1, e) = b.push_buffer(&buf, 1);
        assert!(e.is_none());
        buf.drain(..c);
        buf.extend_from_slice(&full.as_bytes()[split..]);
        let (c2, l2, e) = b.push_buffer(&buf, 1 + l1);
        assert!(e.is_none());
        assert_eq!(c2, buf.len());
        assert_eq!(l1 + l2, 3);
        let batch = b.finish().remove(0);
        assert_eq!(
            batch.columns[2].data,
            ColumnData::F64(vec![1.0, 2.0, 3.0]),
            "split {split}"
        );
    }
    // A string with a newline split across reads.
    let mut b = IlpBatcher::new(&schema, opts());
    let (c, l, e) = b.push_buffer(b"all s=\"a\nb", 1);
    assert_eq!((c, l, e), (0, 0, None));
    assert_eq!(b.rows(), 0);
    let (c, l, e) = b.push_buffer(b"all s=\"a\nb\" 1\n", 1);
    assert_eq!((c, l, e), (14, 1, None));
    assert_eq!(b.rows(), 1);
}

#[test]
fn line_length_bound() {
    let schema = test_schema();
    let o = IlpOptions {
        line_bytes_max: 32,
        ..opts()
    };
    let mut b = IlpBatcher::new(&schema, o);
    let long = format!("trade,sym={} price=1.0\n", "A".repeat(40));
    let (c, l, e) = b.push_buffer(long.as_bytes(), 1);
    assert_eq!((c, l), (0, 0));
    assert!(e.unwrap().to_string().contains("over the bound of 32"));
    assert_eq!(b.rows(), 0);
    // A partial line already over the bound is an error too.
    let (c, _, e) = b.push_buffer("x".repeat(40).as_bytes(), 1);
    assert_eq!(c, 0);
    assert!(e.unwrap().to_string().contains("no end yet"));
    // ... but a short partial line just waits.
    let (c, _, e) = b.push_buffer(b"trade,sym=A pri", 1);
    assert_eq!((c, e), (0, None));
    let e = b.push_line(long.trim_end().as_bytes(), 3).unwrap_err();
    assert!(e.to_string().starts_with("line 3: line is 60 bytes"), "{e}");
}

#[test]
fn take_resets_and_keeps_going() {
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    b.push_line(b"trade,sym=A price=1.0 1", 1).unwrap();
    b.push_line(b"quote,sym=A bid=1.0 1", 2).unwrap();
    assert_eq!(b.rows(), 2);
    assert!(b.approx_bytes() >= 2 * 24);
    let first = b.take();
    assert_eq!(first.len(), 2);
    assert_eq!(b.rows(), 0);
    assert_eq!(b.approx_bytes(), 0);
    assert!(b.take().is_empty());
    b.push_line(b"quote,sym=B bid=2.0 2", 3).unwrap();
    b.push_line(b"trade,sym=B price=2.0 2", 4).unwrap();
    let second = b.finish();
    assert_eq!(
        second.iter().map(|b| b.table.as_str()).collect::<Vec<_>>(),
        ["quote", "trade"]
    );
    assert_eq!(second[0].columns[1].data.symbol(0), Some("B"));
}

#[test]
fn failed_line_leaves_no_trace() {
    let schema = test_schema();
    let mut b = IlpBatcher::new(&schema, opts());
    b.push_line(b"all,sym=A s=\"keep\",l=1i 1", 1).unwrap();
    // Fails after setting sym and s.
    assert!(b.push_line(b"all,sym=B s=\"drop\",l=1.5 2", 2).is_err());
    // An unknown table in a new table's first line leaves no empty batch.
    assert!(b.push_line(b"cache,k1=A v=1.0", 3).is_err());
    b.push_line(b"all,sym=C s=\"also\",l=3i 3", 4).unwrap();
    let batches = b.finish();
    assert_eq!(batches.len(), 1);
    let batch = &batches[0];
    assert_eq!(batch.rows, 2);
    assert_eq!(
        batch.columns[6].data,
        ColumnData::Str {
            offsets: vec![0, 4, 8],
            data: b"keepalso".to_vec()
        }
    );
    assert_eq!(batch.columns[3].data, ColumnData::I64(vec![1, 3]));
    assert_eq!(batch.columns[1].data.symbol(1), Some("C"));
}

#[test]
fn field_order_changes_still_resolve_columns() {
    let b = parse("quote bid=1.0,ask=2.0\nquote ask=3.0,bid=4.0\nquote ask=5.0\n").unwrap();
    assert_eq!(b[0].columns[2].data, ColumnData::F64(vec![1.0, 4.0, 0.0]));
    assert_eq!(b[0].columns[3].data, ColumnData::F64(vec![2.0, 3.0, 5.0]));
}

#[test]
fn wide_tables_use_the_map() {
    let mut cols = String::from("{ name = \"time\", type = \"timestamp\" },");
    for i in 0..40 {
        cols.push_str(&format!("{{ name = \"c{i}\", type = \"i64\" }},"));
    }
    let text = format!("[[table]]\nname = \"wide\"\ncolumn = [{cols}]\n");
    let schema = Schema::parse(&text, "t").unwrap();
    let mut b = IlpBatcher::new(&schema, opts());
    b.push_line(b"wide c39=1i,c0=2i 5", 1).unwrap();
    let e = b.push_line(b"wide c40=1i", 2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 2: unknown column 'c40' in table 'wide'"
    );
    let batch = b.finish().remove(0);
    assert_eq!(batch.columns[40].data, ColumnData::I64(vec![1]));
    assert_eq!(batch.columns[1].data, ColumnData::I64(vec![2]));
}

#[test]
fn ten_thousand_lines() {
    let mut text = String::new();
    for i in 0..10_000 {
        text.push_str(&format!(
            "trade,sym=S{} price={}.25,size={}i {}\n",
            i % 50,
            i,
            i,
            1_700_000_000_000_000_000i64 + i
        ));
    }
    let b = parse(&text).unwrap();
    assert_eq!(b[0].rows, 10_000);
    let ColumnData::Symbol { dict, .. } = &b[0].columns[1].data else {
        panic!()
    };
    assert_eq!(dict.len(), 50);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let schema = test_schema();
        let mut b = IlpBatcher::new(&schema, IlpOptions { line_bytes_max: 64, ..opts() });
        let (c, _, _) = b.push_buffer(&bytes, 1);
        prop_assert!(c <= bytes.len());
        let _ = b.push_line(&bytes, 1);
        let rows = b.rows();
        let batches = b.finish();
        prop_assert_eq!(batches.iter().map(|b| b.rows).sum::<usize>(), rows);
    }

    #[test]
    fn ilp_like_bytes_never_panic(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("trade".to_string()), Just("all".to_string()), Just("cache".to_string()),
                Just(",".to_string()), Just(" ".to_string()), Just("=".to_string()),
                Just("\"".to_string()), Just("\\".to_string()), Just("\n".to_string()),
                Just("\r".to_string()), Just("sym".to_string()), Just("price".to_string()),
                Just("s".to_string()), Just("1.5".to_string()), Just("7i".to_string()),
                Just("t".to_string()), Just("#".to_string()), Just("ts".to_string()),
                Just("==".to_string()), Just("99999999999999999999".to_string()),
            ],
            0..40,
        ),
        split in 0usize..400,
    ) {
        let text = parts.concat();
        let bytes = text.as_bytes();
        let schema = test_schema();
        let mut b = IlpBatcher::new(&schema, opts());
        let split = split.min(bytes.len());
        let (c, l, e) = b.push_buffer(&bytes[..split], 1);
        if e.is_none() {
            let mut rest = bytes[c..].to_vec();
            let (c2, _, _) = b.push_buffer(&rest, 1 + l);
            rest.drain(..c2);
            let _ = b.push_line(&rest, 100);
        }
        let rows = b.rows();
        let batches = b.finish();
        prop_assert_eq!(batches.iter().map(|b| b.rows).sum::<usize>(), rows);
        for batch in &batches {
            for c in &batch.columns {
                prop_assert_eq!(c.data.len(), batch.rows);
            }
        }
    }

    /// Split anywhere, the stream gives the same rows as parsed whole.
    #[test]
    fn splitting_is_invisible(split in 0usize..200) {
        let text = "trade,sym=A\\ B price=1.5,size=3i 10\r\n# c\nall s=\"x\\\"y\nz\",b=t 11\nquote,sym=Q bid=1e3 12\n";
        let whole = parse(text).unwrap();
        let schema = test_schema();
        let mut b = IlpBatcher::new(&schema, opts());
        let split = split.min(text.len());
        let (c, l, e) = b.push_buffer(&text.as_bytes()[..split], 1);
        prop_assert!(e.is_none());
        let rest = &text.as_bytes()[c..];
        let (c2, l2, e) = b.push_buffer(rest, 1 + l);
        prop_assert!(e.is_none());
        prop_assert_eq!(c2, rest.len());
        prop_assert_eq!(l + l2, 4);
        prop_assert_eq!(b.finish(), whole);
    }
}
