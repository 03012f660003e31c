//! The q-sql subset translator: the SQL for each form of the subset,
//! errors for unknown tables and columns, `nyi` for everything else, and
//! no panic on any input.

use proptest::prelude::*;
use tickdb_ipc::qsql::{translate, Catalog, QsqlError, Query};

struct Cat;

impl Catalog for Cat {
    fn columns(&self, table: &str) -> Option<Vec<String>> {
        let cols: &[&str] = match table {
            "trade" => &["time", "sym", "price", "size"],
            "quote" => &["time", "sym", "bid", "ask", "bsize", "asize"],
            // A table whose names are SQL keywords, and one without a time column.
            "order" => &["time", "sym", "group", "desc"],
            "ref" => &["sym", "name"],
            _ => return None,
        };
        Some(cols.iter().map(|s| s.to_string()).collect())
    }

    fn time_column(&self, table: &str) -> Option<String> {
        match table {
            "trade" | "quote" | "order" => Some("time".to_string()),
            _ => None,
        }
    }
}

fn tr(q: &str) -> Result<Query, QsqlError> {
    translate(q, &Cat)
}

/// The SQL and key count, or a panic naming the input.
fn sql(q: &str) -> (String, usize) {
    match tr(q) {
        Ok(Query::Sql { sql, keys }) => (sql, keys),
        other => panic!("{q}: {other:?}"),
    }
}

fn plain(q: &str, want: &str) {
    assert_eq!(sql(q), (want.to_string(), 0), "{q}");
}

fn keyed(q: &str, keys: usize, want: &str) {
    assert_eq!(sql(q), (want.to_string(), keys), "{q}");
}

fn nyi(q: &str) {
    assert_eq!(tr(q), Err(QsqlError::Nyi(q.trim().to_string())), "{q}");
}

fn parse_err(q: &str) -> (usize, String) {
    match tr(q) {
        Err(QsqlError::Parse { at, why }) => (at, why),
        other => panic!("{q}: expected a parse error, got {other:?}"),
    }
}

#[test]
fn select_all_and_projection() {
    plain("select from trade", r#"SELECT * FROM "trade""#);
    plain("  select from trade \n", r#"SELECT * FROM "trade""#);
    plain("select from `trade", r#"SELECT * FROM "trade""#);
    plain(
        "select sym, price from trade",
        r#"SELECT "sym", "price" FROM "trade""#,
    );
    plain(
        "select s:sym,p:price from trade",
        r#"SELECT "sym" AS "s", "price" AS "p" FROM "trade""#,
    );
    // q renames a repeated column.
    plain(
        "select price, price from trade",
        r#"SELECT "price", "price" AS "price1" FROM "trade""#,
    );
    // Names that are SQL keywords are quoted.
    plain(
        "select group, desc from order",
        r#"SELECT "group", "desc" FROM "order""#,
    );
}

#[test]
fn aggregates_without_by() {
    plain(
        "select max price, min price, sum size, avg price from trade",
        r#"SELECT max("price") AS "price", min("price") AS "price1", sum("size") AS "size", avg("price") AS "price2" FROM "trade""#,
    );
    plain(
        "select count i from trade",
        r#"SELECT count(*) AS "x" FROM "trade""#,
    );
    plain(
        "select n:count i from trade",
        r#"SELECT count(*) AS "n" FROM "trade""#,
    );
    plain(
        "select count price from trade",
        r#"SELECT count(*) AS "price" FROM "trade""#,
    );
    plain(
        "select first price, last price from trade",
        r#"SELECT first("price" ORDER BY "time") AS "price", last("price" ORDER BY "time") AS "price1" FROM "trade""#,
    );
    plain(
        "select hi:max[price], lo:min(price) from trade",
        r#"SELECT max("price") AS "hi", min("price") AS "lo" FROM "trade""#,
    );
    plain(
        "select size wavg price from trade",
        r#"SELECT vwap("price", "size") AS "price" FROM "trade""#,
    );
    plain(
        "select vw:wavg[size;price] from trade",
        r#"SELECT vwap("price", "size") AS "vw" FROM "trade""#,
    );
}

#[test]
fn select_by() {
    keyed(
        "select max price by sym from trade",
        1,
        r#"SELECT "sym", max("price") AS "price" FROM "trade" GROUP BY "sym" ORDER BY "sym""#,
    );
    keyed(
        "select open:first price, close:last price, vol:sum size, n:count i by sym from trade where price>0",
        1,
        r#"SELECT "sym", first("price" ORDER BY "time") AS "open", last("price" ORDER BY "time") AS "close", sum("size") AS "vol", count(*) AS "n" FROM "trade" WHERE "price" > 0 GROUP BY "sym" ORDER BY "sym""#,
    );
    keyed(
        "select size wavg price by s:sym, size from trade",
        2,
        r#"SELECT "sym" AS "s", "size", vwap("price", "size") AS "price" FROM "trade" GROUP BY "sym", "size" ORDER BY "s", "size""#,
    );
    keyed(
        "select by sym from trade",
        1,
        r#"SELECT "sym", last("time" ORDER BY "time") AS "time", last("price" ORDER BY "time") AS "price", last("size" ORDER BY "time") AS "size" FROM "trade" GROUP BY "sym" ORDER BY "sym""#,
    );
    keyed(
        "select by sym from quote where sym in `A`B",
        1,
        r#"SELECT "sym", last("time" ORDER BY "time") AS "time", last("bid" ORDER BY "time") AS "bid", last("ask" ORDER BY "time") AS "ask", last("bsize" ORDER BY "time") AS "bsize", last("asize" ORDER BY "time") AS "asize" FROM "quote" WHERE "sym" IN ('A', 'B') GROUP BY "sym" ORDER BY "sym""#,
    );
}

#[test]
fn where_conditions() {
    let w = |conds: &str, want: &str| {
        plain(
            &format!("select from trade where {conds}"),
            &format!(r#"SELECT * FROM "trade" WHERE {want}"#),
        )
    };
    w("sym=`AAPL", r#""sym" = 'AAPL'"#);
    w(
        "sym = `AAPL, price > 100.5",
        r#""sym" = 'AAPL' AND "price" > 100.5"#,
    );
    w("price<-5", r#""price" < -5"#);
    w("price<=5j,size>=5i", r#""price" <= 5 AND "size" >= 5"#);
    w("price<>1.5f", r#""price" <> 1.5"#);
    w("price>1e3", r#""price" > 1000.0"#);
    w("price>-2.5e-3", r#""price" > -0.0025"#);
    w("price>.5", r#""price" > 0.5"#);
    w("sym=`", r#""sym" = ''"#);
    w(r#"sym="it's""#, r#""sym" = 'it''s'"#);
    w("sym in `AAPL`MSFT", r#""sym" IN ('AAPL', 'MSFT')"#);
    w("sym in (`AAPL;`MSFT)", r#""sym" IN ('AAPL', 'MSFT')"#);
    w("sym in `AAPL", r#""sym" IN ('AAPL')"#);
    w("size in 1 2 3", r#""size" IN (1, 2, 3)"#);
    w("sym in ()", "FALSE");
    w("price within (1;2)", r#""price" BETWEEN 1 AND 2"#);
    w("price within 1.5 2.5", r#""price" BETWEEN 1.5 AND 2.5"#);
    w("sym within `A`M", r#""sym" BETWEEN 'A' AND 'M'"#);
    w(
        "time>=2024.01.02D09:30:00.000000000,time<2024.01.02D10:00:00",
        r#""time" >= TIMESTAMP '2024-01-02T09:30:00.000000000Z' AND "time" < TIMESTAMP '2024-01-02T10:00:00Z'"#,
    );
    w(
        "time within (2024.01.02D09:30:00.5;2024.01.02D09:31:00.123456789)",
        r#""time" BETWEEN TIMESTAMP '2024-01-02T09:30:00.500000000Z' AND TIMESTAMP '2024-01-02T09:31:00.123456789Z'"#,
    );
    w(
        "time within 2024.01.02 2024.02.29",
        r#""time" BETWEEN TIMESTAMP '2024-01-02T00:00:00Z' AND TIMESTAMP '2024-02-29T00:00:00Z'"#,
    );
    // A name on the right is a column, as in q.
    plain(
        "select from quote where bid<ask",
        r#"SELECT * FROM "quote" WHERE "bid" < "ask""#,
    );
    plain(
        "select from trade where price within (size;size)",
        r#"SELECT * FROM "trade" WHERE "price" BETWEEN "size" AND "size""#,
    );
    assert_eq!(
        parse_err("select from trade where price>bid"),
        (30, "unknown column bid".into())
    );
}

#[test]
fn literals() {
    let eq = |v: &str, want: &str| {
        plain(
            &format!("select from trade where price={v}"),
            &format!(r#"SELECT * FROM "trade" WHERE "price" = {want}"#),
        )
    };
    eq("1b", "true");
    eq("0b", "false");
    eq("5", "5");
    eq("-5j", "-5");
    eq("2147483647i", "2147483647");
    eq("9223372036854775807", "9223372036854775807");
    eq("1.", "1.0");
    eq("\"a\\\"b\\\\c\\n\"", "'a\"b\\c\n'");
    eq("`BRK.A", "'BRK.A'");
    // Outside the subset's types: nyi, not a parse error.
    for v in [
        "0N",
        "0n",
        "0w",
        "5h",
        "1.5e",
        "2024.01m",
        "09:30:00.000",
        "0D09:30:00",
        "101b",
    ] {
        nyi(&format!("select from trade where price={v}"));
    }
    // Not q literals at all.
    for v in [
        "2024.13.01",
        "2023.02.29",
        "2024.01.02D24:00:00",
        "2024.01.02D09:30",
        "1.5j",
        "5q",
        "99999999999999999999",
        "2024.01.02D09:30:00.1234567890",
        "1e999",
    ] {
        let q = format!("select from trade where price={v}");
        let (at, why) = parse_err(&q);
        assert_eq!(at, 30, "{q}");
        assert_eq!(why, format!("bad literal {v}"), "{q}");
    }
}

#[test]
fn aj() {
    let cols = r#"l."time", l."sym", l."price", l."size", r."bid", r."ask", r."bsize", r."asize""#;
    plain(
        "aj[`sym`time;trade;quote]",
        &format!(
            r#"SELECT {cols} FROM "trade" l ASOF JOIN "quote" r MATCH_CONDITION (l."time" >= r."time") ON l."sym" = r."sym""#
        ),
    );
    plain(
        "aj[`sym`time; `trade; `quote]",
        &format!(
            r#"SELECT {cols} FROM "trade" l ASOF JOIN "quote" r MATCH_CONDITION (l."time" >= r."time") ON l."sym" = r."sym""#
        ),
    );
    plain(
        "aj[`time;trade;quote]",
        &format!(
            r#"SELECT {cols} FROM "trade" l ASOF JOIN "quote" r MATCH_CONDITION (l."time" >= r."time")"#
        ),
    );
    plain(
        "aj[`sym`price`time;trade;trade]",
        r#"SELECT l."time", l."sym", l."price", l."size" FROM "trade" l ASOF JOIN "trade" r MATCH_CONDITION (l."time" >= r."time") ON l."sym" = r."sym" AND l."price" = r."price""#,
    );
    assert_eq!(
        tr("aj[`sym`time;trade;quotes]"),
        Err(QsqlError::UnknownTable("quotes".into()))
    );
    assert_eq!(
        tr("aj[`sym`time;trades;quote]"),
        Err(QsqlError::UnknownTable("trades".into()))
    );
    assert_eq!(
        parse_err("aj[`sym`price`time;trade;quote]"),
        (7, "unknown column price".into())
    );
    assert_eq!(
        parse_err("aj[`sym`1x;trade;quote]"),
        (7, "not a q name: `1x".into())
    );
    nyi("aj[`sym`time;trade]");
    nyi("aj[`sym`time;trade;select from quote]");
    nyi("aj0[`sym`time;trade;quote]");
}

#[test]
fn count_meta_tables() {
    assert_eq!(tr("count trade"), Ok(Query::Count("trade".into())));
    assert_eq!(tr("count[quote]"), Ok(Query::Count("quote".into())));
    assert_eq!(
        tr("count trades"),
        Err(QsqlError::UnknownTable("trades".into()))
    );
    assert_eq!(tr("meta trade"), Ok(Query::Meta("trade".into())));
    assert_eq!(tr("meta`quote"), Ok(Query::Meta("quote".into())));
    assert_eq!(tr("meta nope"), Err(QsqlError::UnknownTable("nope".into())));
    for q in [
        "tables[]",
        "tables",
        "tables`",
        "tables`.",
        "tables[`]",
        " tables[`.] ",
    ] {
        assert_eq!(tr(q), Ok(Query::Tables), "{q}");
    }
    nyi("count `trade");
    nyi("count select from trade");
    nyi("tables[`x]");
    nyi("count");
}

#[test]
fn functional_select() {
    plain("?[trade;();0b;()]", r#"SELECT * FROM "trade""#);
    plain("?[`trade;();();()]", r#"SELECT * FROM "trade""#);
    plain(
        "?[trade;enlist(=;`sym;enlist`AAPL);0b;()]",
        r#"SELECT * FROM "trade" WHERE "sym" = 'AAPL'"#,
    );
    plain(
        "?[trade;((=;`sym;enlist`AAPL);(>;`price;100));0b;`p`s!`price`size]",
        r#"SELECT "price" AS "p", "size" AS "s" FROM "trade" WHERE "sym" = 'AAPL' AND "price" > 100"#,
    );
    plain(
        "?[trade;enlist(in;`sym;`A`B);0b;`mx`n!((max;`price);(count;`i))]",
        r#"SELECT max("price") AS "mx", count(*) AS "n" FROM "trade" WHERE "sym" IN ('A', 'B')"#,
    );
    plain(
        "?[trade;enlist(within;`price;(1;2));0b;(enlist`vw)!enlist(wavg;`size;`price)]",
        r#"SELECT vwap("price", "size") AS "vw" FROM "trade" WHERE "price" BETWEEN 1 AND 2"#,
    );
    plain(
        "?[trade;enlist(in;`sym;enlist`A);0b;()]",
        r#"SELECT * FROM "trade" WHERE "sym" IN ('A')"#,
    );
    plain(
        "?[trade;enlist(<;`time;2024.01.02D09:30:00);0b;()]",
        r#"SELECT * FROM "trade" WHERE "time" < TIMESTAMP '2024-01-02T09:30:00Z'"#,
    );
    keyed(
        "?[trade;();(enlist`sym)!enlist`sym;(enlist`mx)!enlist(max;`price)]",
        1,
        r#"SELECT "sym", max("price") AS "mx" FROM "trade" GROUP BY "sym" ORDER BY "sym""#,
    );
    keyed(
        "?[trade; (); `s`z!`sym`size; `o`c!((first;`price);(last;`price))]",
        2,
        r#"SELECT "sym" AS "s", "size" AS "z", first("price" ORDER BY "time") AS "o", last("price" ORDER BY "time") AS "c" FROM "trade" GROUP BY "sym", "size" ORDER BY "s", "z""#,
    );
    keyed(
        "?[trade;();(enlist`sym)!enlist`sym;()]",
        1,
        r#"SELECT "sym", last("time" ORDER BY "time") AS "time", last("price" ORDER BY "time") AS "price", last("size" ORDER BY "time") AS "size" FROM "trade" GROUP BY "sym" ORDER BY "sym""#,
    );
    // A symbol atom in a parse tree is a column.
    assert_eq!(
        parse_err("?[trade;enlist(=;`sym;`AAPL);0b;()]").1,
        "unknown column AAPL"
    );
    assert_eq!(
        tr("?[trades;();0b;()]"),
        Err(QsqlError::UnknownTable("trades".into()))
    );
    assert_eq!(
        parse_err("?[trade;();0b;`a`b!enlist(max;`price)]").1,
        "dictionary keys and values differ in length"
    );
    assert_eq!(
        parse_err("?[trade;();0b;`a!`pricex]").1,
        "unknown column pricex"
    );
    nyi("?[trade;();1b;()]");
    nyi("?[trade;();0b;`p]");
    nyi("?[trade;();0b]");
    nyi("?[trade;();0b;();10]");
    nyi("?[trade;enlist(like;`sym;\"A*\");0b;()]");
    nyi("?[trade;();0b;`a`b!(`price;(max;`size))]");
}

#[test]
fn unknown_table_and_column() {
    assert_eq!(
        tr("select from trades"),
        Err(QsqlError::UnknownTable("trades".into()))
    );
    assert_eq!(
        tr("select pricex from trades"),
        Err(QsqlError::UnknownTable("trades".into()))
    );
    assert_eq!(
        parse_err("select pricex from trade"),
        (7, "unknown column pricex".into())
    );
    assert_eq!(
        parse_err("select max pricex by sym from trade"),
        (11, "unknown column pricex".into())
    );
    assert_eq!(
        parse_err("select by symx from trade"),
        (10, "unknown column symx".into())
    );
    assert_eq!(
        parse_err("select from trade where prix>1"),
        (24, "unknown column prix".into())
    );
    // Character offsets, not bytes.
    assert_eq!(parse_err("select from trade where sym=\"é\",prix>1").0, 32);
}

#[test]
fn malformed() {
    assert_eq!(
        parse_err("select from trade where sym in (`a;`b"),
        (31, "unclosed `(`".into())
    );
    assert_eq!(parse_err("select max[price)) from trade").0, 16);
    assert_eq!(
        parse_err("select from trade where sym=\"abc"),
        (28, "unterminated string".into())
    );
    assert_eq!(
        parse_err("select price"),
        (12, "select without from".into())
    );
    assert_eq!(
        parse_err("select price, from trade"),
        (12, "empty column expression".into())
    );
    assert_eq!(
        parse_err("select from"),
        (11, "expected a table after from".into())
    );
    assert_eq!(
        parse_err("select from trade where price within (1;2;3)").1,
        "within takes two bounds"
    );
    assert_eq!(
        parse_err("select from trade where price>").1,
        "expected a value after the operator"
    );
    assert_eq!(parse_err("?[`tr.ade;();0b;()]").1, "not a q name: `tr.ade");
    assert_eq!(parse_err("").1, "empty expression");
    assert_eq!(parse_err("   ").1, "empty expression");
}

#[test]
fn outside_the_subset() {
    for q in [
        "x:select from trade",
        "exec price from trade",
        "update price:1 from trade",
        "delete from trade",
        "select[10] from trade",
        "select from (select from trade)",
        "select from trade where sym in exec sym from quote",
        "select by 5 xbar time from trade",
        "select max price by sym, 5 xbar size from trade",
        "{x+1}[2]",
        "select price*size from trade",
        "select sym, max price from trade",
        "select price by sym from trade",
        "select distinct sym from trade",
        "select from trade where i<10",
        "select i from trade",
        "select from trade where not price>1",
        "select from trade where price>avg price",
        "SELECT * FROM trade",
        "1+1",
        "trade",
        "select first name from ref",
        "select by sym from ref",
        "select from trade lj quote",
        "select from trade where sym like \"A*\"",
        "  sum trade`price  ",
    ] {
        nyi(q);
    }
}

fn valid_queries() -> Vec<&'static str> {
    vec![
        "select from trade",
        "select max price, n:count i by sym from trade where sym in `A`B, price within (1;2)",
        "select by sym from quote where time>=2024.01.02D09:30:00.000000001",
        "aj[`sym`time;trade;quote]",
        "?[trade;((=;`sym;enlist`AAPL);(>;`price;100));`s`z!`sym`size;`mx`n!((max;`price);(count;`i))]",
        "?[trade;enlist(within;`price;(1;2));0b;(enlist`vw)!enlist(wavg;`size;`price)]",
        "select size wavg price, wavg[size;price] from trade where sym=\"a\\\"b\"",
        "tables[`.]",
        "count trade",
    ]
}

fn mutate(q: &str, ops: &[(u8, usize, char)]) -> String {
    let mut cs: Vec<char> = q.chars().collect();
    for &(op, pos, c) in ops {
        let at = if cs.is_empty() {
            0
        } else {
            pos % (cs.len() + 1)
        };
        match op % 4 {
            0 => cs.insert(at, c),
            1 if at < cs.len() => {
                cs.remove(at);
            }
            2 if at < cs.len() => cs[at] = c,
            // Duplicate a slice: repeats brackets, enlists, commas.
            _ => {
                let end = (at + c as usize % 8).min(cs.len());
                let dup: Vec<char> = cs[at..end].to_vec();
                cs.splice(at..at, dup);
            }
        }
    }
    cs.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_text_never_panics(s in "[ -~\\t\\né`(\\[{;!?<>=:,.\"\\\\]{0,80}") {
        let _ = tr(&s);
    }

    #[test]
    fn any_string_never_panics(s in any::<String>()) {
        let _ = tr(&s);
    }

    #[test]
    fn mutated_queries_never_panic(
        i in 0usize..9,
        ops in proptest::collection::vec(
            (any::<u8>(), any::<usize>(), prop::sample::select(vec![
                '`', '(', ')', '[', ']', ';', ',', ':', '!', '?', '-', '.', '"', '\\', ' ', 'D', 'e',
                '0', '9', 'b', 'i', 'j', 'f', '<', '>', '=', 'x', 'é', '\u{0}',
            ])),
            1..6,
        ),
    ) {
        let q = mutate(valid_queries()[i], &ops);
        let _ = tr(&q);
    }
}

#[test]
fn deep_nesting_never_overflows() {
    let deep = format!("?[trade;{}();0b;()]", "enlist ".repeat(100_000));
    nyi(&deep);
    let parens = format!(
        "?[trade;{}(){};0b;()]",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    nyi(&parens);
    let dicts = format!("?[trade;();0b;{}()]", "`a!".repeat(100_000));
    nyi(&dicts);
}

#[test]
fn all_valid_queries_translate() {
    for q in valid_queries() {
        assert!(tr(q).is_ok(), "{q}: {:?}", tr(q));
    }
}
