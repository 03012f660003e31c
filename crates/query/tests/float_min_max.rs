//! max/min over floats holding NaN: NaN is the greatest float (PostgreSQL,
//! DuckDB), so max of values with a NaN is NaN and min skips NaN unless
//! every value is NaN; nulls are skipped. Grouped, ungrouped and window
//! forms agree, whatever the row order (apache/datafusion#24432).
//! `TICKDB_SEED=n` replays one order.

mod common;

use common::*;
use datafusion::arrow::array::{Array, AsArray, Float64Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use tickdb_query::QueryEngine;

/// Rows of one symbol, before shuffling.
fn group(sym: &'static str, prices: &[Option<f64>], copies: usize) -> Vec<Trade> {
    let mut out = Vec::new();
    for _ in 0..copies {
        for p in prices {
            out.push(Trade {
                time: 0,
                sym,
                price: *p,
                size: 0,
            });
        }
    }
    out
}

const NEG_NAN: f64 = -f64::NAN;

/// A (max, min) pair.
type MaxMin = (Option<f64>, Option<f64>);

/// Symbols with NaN, -NaN, nulls, signed zeros and infinities in them.
fn dataset(rng: &mut StdRng) -> Vec<Trade> {
    let mut t = Vec::new();
    // Many numbers and a few NaNs anywhere among them.
    let mut a: Vec<Option<f64>> = (0..30_000)
        .map(|i| Some(100.0 + (i % 997) as f64 * 0.5))
        .collect();
    for _ in 0..5 {
        let at = rng.random_range(0..a.len());
        a[at] = Some(f64::NAN);
    }
    a.push(None);
    t.extend(group("A", &a, 1));
    // NaNs of both signs only, and nulls: NaN both ways.
    t.extend(group("B", &[Some(f64::NAN), Some(NEG_NAN), None], 50));
    // Signed zeros: max +0.0, min -0.0.
    t.extend(group("C", &[Some(-0.0), Some(0.0), None], 50));
    // Infinities without NaN.
    t.extend(group(
        "D",
        &[Some(f64::NEG_INFINITY), Some(1.0), Some(f64::INFINITY)],
        50,
    ));
    // Only -inf: max and min are -inf.
    t.extend(group("E", &[Some(f64::NEG_INFINITY)], 20));
    // Only nulls: null.
    t.extend(group("F", &[None], 20));
    // A negative NaN (what 0.0/0.0 gives on x86) among numbers.
    let mut g: Vec<Option<f64>> = (0..5_000).map(|i| Some(-(i as f64))).collect();
    let at = rng.random_range(0..g.len());
    g[at] = Some(NEG_NAN);
    t.extend(group("G", &g, 1));
    // +inf and NaN: max NaN, min +inf.
    t.extend(group("H", &[Some(f64::INFINITY), Some(f64::NAN)], 30));
    // One NaN, one number.
    t.extend(group("I", &[Some(f64::NAN), Some(-7.5)], 1));
    t
}

/// The expected max: NaN when there is one, else the `total_cmp` max.
fn want_max(ps: &[f64]) -> Option<f64> {
    if ps.iter().any(|p| p.is_nan()) {
        return Some(f64::NAN);
    }
    ps.iter().copied().max_by(f64::total_cmp)
}

/// The expected min: the least number, NaN when only NaNs.
fn want_min(ps: &[f64]) -> Option<f64> {
    let n = ps
        .iter()
        .copied()
        .filter(|p| !p.is_nan())
        .min_by(f64::total_cmp);
    n.or(if ps.is_empty() { None } else { Some(f64::NAN) })
}

/// Same value: bit for bit, NaN the canonical one.
fn same(got: Option<f64>, want: Option<f64>) -> bool {
    match (got, want) {
        (Some(g), Some(w)) if w.is_nan() => g.to_bits() == f64::NAN.to_bits(),
        (Some(g), Some(w)) => g.to_bits() == w.to_bits(),
        (None, None) => true,
        _ => false,
    }
}

async fn batches(e: &QueryEngine, sql: &str) -> Vec<RecordBatch> {
    e.query(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
        .batches
}

fn strings(b: &RecordBatch, col: usize) -> Vec<String> {
    let a = cast(b.column(col), &DataType::Utf8).unwrap();
    a.as_string::<i32>()
        .iter()
        .map(|s| s.unwrap().to_string())
        .collect()
}

fn floats(b: &RecordBatch, col: usize) -> Vec<Option<f64>> {
    b.column(col)
        .as_primitive::<Float64Type>()
        .iter()
        .collect::<Vec<_>>()
}

fn show(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:?} ({:#x})", x.to_bits()),
        None => "null".into(),
    }
}

/// Shuffles the rows, gives them rising times in that order, and loads.
fn load(rng: &mut StdRng) -> (Vec<Trade>, QueryEngine) {
    let mut rows = dataset(rng);
    rows.shuffle(rng);
    for (i, r) in rows.iter_mut().enumerate() {
        r.time = T0 + i as i64 * 1_000;
        r.size = rng.random_range(-1_000..1_000);
    }
    let e = engine(store_with(&rows));
    (rows, e)
}

fn by_sym(rows: &[Trade]) -> BTreeMap<&'static str, Vec<f64>> {
    let mut m: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for r in rows {
        let v = m.entry(r.sym).or_default();
        if let Some(p) = r.price {
            v.push(p);
        }
    }
    m
}

fn seeds() -> Vec<u64> {
    match std::env::var("TICKDB_SEED") {
        Ok(s) => vec![s.parse().expect("TICKDB_SEED is a number")],
        Err(_) => {
            let base: u64 = rand::rng().random();
            (0..4).map(|i| base.wrapping_add(i)).collect()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_and_ungrouped_agree_whatever_the_order() {
    for seed in seeds() {
        eprintln!("float_min_max seed {seed} (TICKDB_SEED={seed} replays it)");
        let mut rng = StdRng::seed_from_u64(seed);
        let (rows, e) = load(&mut rng);
        let groups = by_sym(&rows);

        // Grouped.
        let mut seen = 0;
        for b in batches(
            &e,
            "SELECT sym, max(price), min(price) FROM trade GROUP BY sym",
        )
        .await
        {
            let (syms, maxs, mins) = (strings(&b, 0), floats(&b, 1), floats(&b, 2));
            for i in 0..b.num_rows() {
                let ps = &groups[syms[i].as_str()];
                let (wx, wn) = (want_max(ps), want_min(ps));
                assert!(
                    same(maxs[i], wx),
                    "seed {seed}: max({}) = {}, want {}",
                    syms[i],
                    show(maxs[i]),
                    show(wx)
                );
                assert!(
                    same(mins[i], wn),
                    "seed {seed}: min({}) = {}, want {}",
                    syms[i],
                    show(mins[i]),
                    show(wn)
                );
                seen += 1;
            }
        }
        assert_eq!(seen, groups.len());

        // Ungrouped, one symbol at a time and over the whole table.
        for (sym, ps) in &groups {
            let b = batches(
                &e,
                &format!("SELECT max(price), min(price) FROM trade WHERE sym = '{sym}'"),
            )
            .await;
            let b = b.iter().find(|b| b.num_rows() > 0).unwrap();
            let (x, n) = (floats(b, 0)[0], floats(b, 1)[0]);
            assert!(
                same(x, want_max(ps)),
                "seed {seed}: ungrouped max({sym}) = {}",
                show(x)
            );
            assert!(
                same(n, want_min(ps)),
                "seed {seed}: ungrouped min({sym}) = {}",
                show(n)
            );
        }
        let all: Vec<f64> = rows.iter().filter_map(|r| r.price).collect();
        let b = batches(&e, "SELECT max(price), min(price) FROM trade").await;
        let b = b.iter().find(|b| b.num_rows() > 0).unwrap();
        assert!(same(floats(b, 0)[0], want_max(&all)), "seed {seed}");
        assert!(same(floats(b, 1)[0], want_min(&all)), "seed {seed}");

        // Filtered aggregates take the same paths with a filter.
        let mut seen = 0;
        for b in batches(
            &e,
            "SELECT sym, max(price) FILTER (WHERE size >= 0), \
             min(price) FILTER (WHERE size >= 0) FROM trade GROUP BY sym",
        )
        .await
        {
            let (syms, maxs, mins) = (strings(&b, 0), floats(&b, 1), floats(&b, 2));
            for i in 0..b.num_rows() {
                let ps: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.sym == syms[i] && r.size >= 0)
                    .filter_map(|r| r.price)
                    .collect();
                assert!(same(maxs[i], want_max(&ps)), "seed {seed}: {}", syms[i]);
                assert!(same(mins[i], want_min(&ps)), "seed {seed}: {}", syms[i]);
                seen += 1;
            }
        }
        assert_eq!(seen, groups.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_forms_agree() {
    let seed = seeds()[0];
    eprintln!("float_min_max window seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (rows, e) = load(&mut rng);
    let wants: BTreeMap<&str, MaxMin> = by_sym(&rows)
        .into_iter()
        .map(|(s, ps)| (s, (want_max(&ps), want_min(&ps))))
        .collect();

    // Whole partition.
    for b in batches(
        &e,
        "SELECT sym, max(price) OVER (PARTITION BY sym), \
         min(price) OVER (PARTITION BY sym) FROM trade",
    )
    .await
    {
        let (syms, maxs, mins) = (strings(&b, 0), floats(&b, 1), floats(&b, 2));
        for i in 0..b.num_rows() {
            let (wx, wn) = wants[syms[i].as_str()];
            assert!(same(maxs[i], wx), "seed {seed}: {}", syms[i]);
            assert!(same(mins[i], wn), "seed {seed}: {}", syms[i]);
        }
    }

    // Growing frame (running max/min) and sliding frame, in time order.
    let mut per_sym: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
    for r in &rows {
        per_sym.entry(r.sym).or_default().push(r.price);
    }
    // Running max/min per row, folded (the frames grow to 30k rows).
    let mut running: BTreeMap<&str, Vec<MaxMin>> = BTreeMap::new();
    for (sym, ps) in &per_sym {
        let (mut nan, mut hi, mut lo) = (false, None::<f64>, None::<f64>);
        let v = running.entry(sym).or_default();
        for p in ps {
            let Some(p) = p else {
                v.push(v.last().copied().unwrap_or((None, None)));
                continue;
            };
            if p.is_nan() {
                nan = true;
            } else {
                hi = Some(hi.map_or(*p, |h| std::cmp::max_by(h, *p, f64::total_cmp)));
                lo = Some(lo.map_or(*p, |l| std::cmp::min_by(l, *p, f64::total_cmp)));
            }
            v.push((
                if nan { Some(f64::NAN) } else { hi },
                lo.or(nan.then_some(f64::NAN)),
            ));
        }
    }
    let frame = |ps: &[Option<f64>], lo: usize, hi: usize| -> Vec<f64> {
        ps[lo..=hi].iter().flatten().copied().collect()
    };
    let bs = batches(
        &e,
        "SELECT sym, \
           max(price) OVER (PARTITION BY sym ORDER BY time), \
           min(price) OVER (PARTITION BY sym ORDER BY time), \
           max(price) OVER (PARTITION BY sym ORDER BY time ROWS BETWEEN 3 PRECEDING AND CURRENT ROW), \
           min(price) OVER (PARTITION BY sym ORDER BY time ROWS BETWEEN 3 PRECEDING AND CURRENT ROW), \
           row_number() OVER (PARTITION BY sym ORDER BY time) \
         FROM trade",
    )
    .await;
    for b in bs {
        let syms = strings(&b, 0);
        let cols: Vec<Vec<Option<f64>>> = (1..5).map(|c| floats(&b, c)).collect();
        let rn = b
            .column(5)
            .as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
        for i in 0..b.num_rows() {
            let ps = &per_sym[syms[i].as_str()];
            let k = rn.value(i) as usize - 1;
            let slide = frame(ps, k.saturating_sub(3), k);
            let wants = [
                running[syms[i].as_str()][k].0,
                running[syms[i].as_str()][k].1,
                want_max(&slide),
                want_min(&slide),
            ];
            for (c, w) in wants.iter().enumerate() {
                assert!(
                    same(cols[c][i], *w),
                    "seed {seed}: {} row {k} column {c}: {} want {}",
                    syms[i],
                    show(cols[c][i]),
                    show(*w)
                );
            }
        }
    }
}

/// Many single-row groups: past the probe rows, partial aggregation is
/// skipped and rows become states directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_row_groups_keep_nan() {
    let n = 150_000;
    let rows: Vec<Trade> = (0..n)
        .map(|i| Trade {
            time: T0 + i as i64,
            sym: SYMS[i % SYMS.len()],
            price: match i % 7 {
                0 => None,
                1 => Some(f64::NAN),
                2 => Some(NEG_NAN),
                _ => Some(i as f64),
            },
            size: 1,
        })
        .collect();
    let e = engine(store_with(&rows));
    let mut seen = 0;
    for b in batches(
        &e,
        "SELECT time, max(price), min(price) FROM trade GROUP BY time",
    )
    .await
    {
        let ts = cast(b.column(0), &DataType::Int64).unwrap();
        let ts = ts.as_primitive::<Int64Type>();
        let (maxs, mins) = (floats(&b, 1), floats(&b, 2));
        for i in 0..b.num_rows() {
            let r = &rows[(ts.value(i) - T0) as usize];
            let ps: Vec<f64> = r.price.into_iter().collect();
            assert!(same(maxs[i], want_max(&ps)), "row {:?}", r);
            assert!(same(mins[i], want_min(&ps)), "row {:?}", r);
            seen += 1;
        }
    }
    assert_eq!(seen, n);
}

/// Other types are DataFusion's max/min unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_types_unchanged() {
    let seed = seeds()[0];
    eprintln!("float_min_max other types seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (rows, e) = load(&mut rng);
    let mut want: BTreeMap<&str, (i64, i64, i64, i64)> = BTreeMap::new();
    for r in &rows {
        let w = want
            .entry(r.sym)
            .or_insert((i64::MIN, i64::MAX, i64::MIN, i64::MAX));
        w.0 = w.0.max(r.size);
        w.1 = w.1.min(r.size);
        w.2 = w.2.max(r.time);
        w.3 = w.3.min(r.time);
    }
    let mut seen = 0;
    for b in batches(
        &e,
        "SELECT sym, max(size), min(size), max(time), min(time), max(sym), min(sym) \
         FROM trade GROUP BY sym",
    )
    .await
    {
        assert_eq!(
            b.schema().field(3).data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, None),
            "max(time) keeps its type"
        );
        let syms = strings(&b, 0);
        let col = |c: usize| {
            let a = cast(b.column(c), &DataType::Int64).unwrap();
            a.as_primitive::<Int64Type>().values().to_vec()
        };
        let (mx, mn, tx, tn) = (col(1), col(2), col(3), col(4));
        let (sx, sn) = (strings(&b, 5), strings(&b, 6));
        for i in 0..b.num_rows() {
            let w = want[syms[i].as_str()];
            assert_eq!((mx[i], mn[i], tx[i], tn[i]), w, "{}", syms[i]);
            assert_eq!((&sx[i], &sn[i]), (&syms[i], &syms[i]));
            seen += 1;
        }
    }
    assert_eq!(seen, want.len());

    // Int32 and decimal inputs.
    let mut seen = 0;
    for b in batches(
        &e,
        "SELECT sym, max(CAST(size AS INT)), min(CAST(size AS DECIMAL(10,2))) \
         FROM trade GROUP BY sym",
    )
    .await
    {
        assert_eq!(b.schema().field(1).data_type(), &DataType::Int32);
        assert_eq!(
            b.schema().field(2).data_type(),
            &DataType::Decimal128(10, 2)
        );
        let syms = strings(&b, 0);
        let ix = cast(b.column(1), &DataType::Int64).unwrap();
        let ix = ix.as_primitive::<Int64Type>();
        let dn = strings(&b, 2);
        for i in 0..b.num_rows() {
            let w = want[syms[i].as_str()];
            assert_eq!(ix.value(i), w.0);
            assert_eq!(dn[i], format!("{}.00", w.1));
            seen += 1;
        }
    }
    assert_eq!(seen, want.len());

    let b = batches(
        &e,
        "SELECT max(size), min(size), max(sym), min(sym), max(time), min(time) FROM trade",
    )
    .await;
    let b = b.iter().find(|b| b.num_rows() > 0).unwrap();
    let sizes: Vec<i64> = rows.iter().map(|r| r.size).collect();
    let col = |c: usize| {
        let a = cast(b.column(c), &DataType::Int64).unwrap();
        a.as_primitive::<Int64Type>().value(0)
    };
    assert_eq!(col(0), *sizes.iter().max().unwrap());
    assert_eq!(col(1), *sizes.iter().min().unwrap());
    assert_eq!(strings(b, 2)[0], "I");
    assert_eq!(strings(b, 3)[0], "A");
    assert_eq!(col(4), T0 + (rows.len() as i64 - 1) * 1_000);
    assert_eq!(col(5), T0);

    // Scalar greatest/least are not aggregates: untouched.
    let b = batches(&e, "SELECT greatest(1.0, 2.0), least(1.0, 2.0)").await;
    let g = b[0]
        .column(0)
        .as_any()
        .downcast_ref::<Float64Array>()
        .map(|a| a.value(0));
    let l = b[0]
        .column(1)
        .as_any()
        .downcast_ref::<Float64Array>()
        .map(|a| a.value(0));
    assert_eq!((g, l), (Some(2.0), Some(1.0)));
}

/// The query plan still names the functions `max` and `min`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_unchanged() {
    let e = engine(store_with(&gen_trades(100)));
    let r = e
        .query("SELECT sym, max(price), min(price) FROM trade GROUP BY sym")
        .await
        .unwrap();
    let names: Vec<&str> = r
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["sym", "max(trade.price)", "min(trade.price)"]);
}
