#!/usr/bin/env python3
"""The Intel Optane kdb+ market-data study's monitor query at the study's
scale: the as-of join of all of one symbol's trades with the prevailing
quote, on an rdb holding 50M rows (5M trades, 45M quotes, 1000 symbols with
skewed activity), for the most active symbol and for a median one, against
QuestDB (default and its best temporal-join hint) and DuckDB on the same
rows in the same run.

    .venv/bin/python scripts/bench_monitor.py [--quick] [--out docs/benchmarks.md]

The section "## One symbol on a 50M-row rdb" of --out is replaced in place
(or appended); `scripts/bench.sh` runs this after `scripts/bench_query.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import asof_floor  # noqa: E402
import bench_query as bq  # noqa: E402
import benchutil  # noqa: E402

SECTION = "## One symbol on a 50M-row rdb"
REGEN_LINE = ("`.venv/bin/python scripts/bench_monitor.py [--quick]` regenerates \"One symbol on a 50M-row rdb\" "
              "alone, in place (`scripts/bench.sh` runs it after `scripts/bench_query.py`).")
# The study's monitor query took about 47 ms on kdb+; the target here.
TARGET_MS = 5.0
# Runs of `select 1` whose median is the floor's round trip.
ROUND_TRIP_RUNS = 21


def log(msg: str) -> None:
    print(f"[bench monitor] {msg}", file=sys.stderr, flush=True)


def queries(sym: str) -> dict:
    """The monitor query for one symbol, in each system's dialect."""
    q = bq.QUERIES["monitor"]
    return {k: (v.replace("'S0000'", f"'{sym}'") if isinstance(v, str) else v) for k, v in q.items()}


def floor_time(nbytes: int, rate: float, round_trip: float) -> float:
    """Seconds a query reading `nbytes` at `rate` bytes/s takes at least,
    answered over a connection whose round trip is `round_trip`."""
    return nbytes / rate + round_trip


def mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} KB"


def floor_text(rows: list, floors: dict, rate: float, cores: int, round_trip: float) -> str:
    """The section's floors: what each symbol's join must read in tickdb's
    layout and in a per-symbol one, and the least time that takes here."""
    out = ["Floors (`scripts/asof_floor.py`, from the rows sent): whatever a system does, the join must read every "
           "trade's time, the times of the quote that answers it and of the symbol's next quote (which shows the "
           "answer is the last at or before the trade), and the answer's bid; in tickdb's layout (columns in "
           "arrival order in 64-byte-aligned chunks, a symbol's rows found through the chunks' symbol index) also "
           "the index entries of those rows; in a per-symbol layout (each symbol's rows contiguous in time order, "
           "as kdb+'s `p#` on disk) the times and bids are dense arrays and no index is read. Counted in 64-byte "
           "cache lines, each read at least once per run, at this machine's streaming rate measured in the same "
           f"run ({rate / 1e9:.1f} GB/s reading a warm array as large as the largest floor on {cores} threads), "
           f"plus the round trip of `select 1` over the same connection ({bq.fmt_s(round_trip)}):\n",
           "| symbol | tickdb's layout: read at least | its floor | per-symbol layout: read at least | its floor "
           "| tickdb |",
           "|---|---|---|---|---|---|"]
    for label, sym, r in rows:
        f = floors[sym]
        lay, per = sum(f.layout.values()), sum(f.per_symbol.values())
        parts = ", ".join(f"{k} {mb(v)}" for k, v in f.layout.items())
        out.append(f"| {label} ({sym}) | {mb(lay)} ({parts}) | {bq.fmt_s(floor_time(lay, rate, round_trip))} | "
                   f"{mb(per)} | {bq.fmt_s(floor_time(per, rate, round_trip))} | {bq.fmt_s(r['tickdb'][0])} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trades", type=int, default=5_000_000, help="trades (default 5M)")
    ap.add_argument("--quotes", type=int, default=45_000_000, help="quotes (default 45M)")
    ap.add_argument("--syms", type=int, default=1000, help="symbols, Zipf-skewed (default 1000)")
    ap.add_argument("--repeats", type=int, default=9, help="timed runs per query after a warm-up (default 9)")
    ap.add_argument("--quick", action="store_true", help="500k trades + 4.5M quotes, 3 repeats")
    ap.add_argument("--no-questdb", action="store_true")
    ap.add_argument("--no-redis", action="store_true", help="accepted for scripts/bench.sh; no Redis here")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--bin", default=str(bq.ROOT / "target" / "release" / "tickdb"))
    ap.add_argument("--out", "--append", dest="out",
                    help="replace (or append) the section in this markdown file (else print it)")
    a = ap.parse_args()
    if a.quick:
        a.trades, a.quotes, a.repeats = 500_000, 4_500_000, 3
    jar = bq.questdb_jar()
    use_questdb = not a.no_questdb and jar.exists() and shutil.which("java") is not None
    if not a.no_questdb and not use_questdb:
        log(f"QuestDB skipped: need java and {jar} (tickdb bench report downloads it)")
    work = Path(tempfile.mkdtemp(prefix="tickdb-bench-monitor-"))
    servers: list[bq.Server] = []
    started = time.monotonic()
    mach = benchutil.machine(work)
    load_before = mach["loadavg_start"]
    try:
        log(f"generating {a.trades:,} trades and {a.quotes:,} quotes over {a.syms} symbols (seed {a.seed})")
        trades, quotes = bq.gen(a.trades, a.syms, a.seed, quote_rows=a.quotes)
        # Activity rank 1 (the most active) and the median rank.
        picks = {"most active": "S0000", "median": f"S{a.syms // 2:04d}"}
        # Each symbol's answer and the least its join must read, from the
        # rows about to be sent (scripts/asof_floor.py).
        floors = {sym: asof_floor.one_symbol(trades, quotes, sym) for sym in picks.values()}

        tick, http, _ = bq.start_tickdb(a.bin, work)
        servers.append(tick)
        bq.load_all(http, "tickdb", trades, quotes, "select count(*) from {table}")
        qhttp = None
        # One kept-alive connection per system, as a monitor polling holds
        # one (`tickdb monitor` does): a run times the query, not a TCP
        # connect and the client's setting one up.
        tick_s, quest_s = requests.Session(), requests.Session()
        if use_questdb:
            qdb, qhttp = bq.start_questdb(jar, work)
            servers.append(qdb)
            bq.load_all(qhttp, "QuestDB", trades, quotes, "select count() from {table}")
        con = bq.duckdb_with(trades, quotes)
        del trades, quotes

        rows = []
        disagree = []
        # Systems timed on a machine that was not quiet (settle gave up).
        busy: list[str] = []

        for label, sym in picks.items():
            q = queries(sym)
            benchutil.quiet("tickdb", sym, busy, log)
            r = {"tickdb": bq.timed(lambda: bq.http_exec(http, q["tickdb"], tick_s), a.repeats)}
            if qhttp:
                benchutil.quiet("QuestDB", sym, busy, log)
                r["questdb"] = bq.timed(lambda: bq.http_exec(qhttp, q["questdb"], quest_s), a.repeats)
                best = bq.questdb_best(qhttp, q, r["questdb"], a.repeats, quest_s)
                if best:
                    r["questdb_best"] = best[1]
                    r["hint"] = best[0]
            benchutil.quiet("DuckDB", sym, busy, log)
            r["duckdb"] = bq.timed(lambda: con.execute(q["duckdb"]).fetchall(), a.repeats)
            answers = {k: v[1][0] for k, v in r.items() if k != "hint"}
            answers["the rows sent (numpy)"] = floors[sym].answer
            if not benchutil.same_answers(answers):
                disagree.append(f"{sym}: {answers}")
                log(f"  WARNING: the systems disagree for {sym}: {answers}")
            log(f"{label} {sym}: " + ", ".join(f"{k} {bq.fmt_s(v[0])}" for k, v in r.items() if k != "hint"))
            rows.append((label, sym, r))

        load_after = os.getloadavg()[0]
        cores = mach["cores"]
        # The floors' round trip and streaming rate, measured last, once
        # the machine is quiet: `select 1` over tickdb's kept-alive
        # connection, and a warm array as large as the largest floor read
        # on every core.
        benchutil.quiet("the floors", "the machine", busy, log)
        round_trip = bq.timed(lambda: bq.http_exec(http, "select 1", tick_s), ROUND_TRIP_RUNS)[0]
        floor_bytes = max(sum(f.layout.values()) for f in floors.values())
        rate = asof_floor.stream_bytes_per_s(floor_bytes, cores)
        log(f"floors: round trip {bq.fmt_s(round_trip)}, streaming {rate / 1e9:.1f} GB/s on {cores} threads")
        total = a.trades + a.quotes
        md = [f"{SECTION}\n",
              f"Generated by `.venv/bin/python scripts/bench_monitor.py{' --quick' if a.quick else ''}` in "
              f"{time.monotonic() - started:.0f} s on {benchutil.machine_text(mach)}. The monitor query of the Intel Optane kdb+ market-data study "
              f"(the as-of join of all of one symbol's trades with the prevailing quote; the study saw about 47 ms on "
              f"kdb+ on its 65M-row rdb) on an rdb holding {total / 1e6:.0f}M rows: {a.trades:,} trades and "
              f"{a.quotes:,} quotes over {a.syms} symbols with skewed activity (Zipf), times sorted over a 6-hour "
              f"session, loaded into each system through the `questdb` ILP client. Medians of {a.repeats} runs after "
              f"a warm-up; tickdb and QuestDB answer over HTTP `/exec` (their times include HTTP and JSON), DuckDB in "
              f"process; each server is sent its queries over one kept-alive HTTP connection, as a monitor polling "
              f"holds one (`tickdb monitor` does). tickdb reuses the optimized plan of a statement it has run "
              f"before (its documented plan "
              f"cache, on by default; each table is still read afresh every run), so its timed runs skip parsing "
              f"and optimizing, as a monitor polling the same statement does. QuestDB: its default ASOF algorithm, then each temporal-join hint, the fastest reported "
              f"(as in the SQL section). DuckDB: its defaults are its documented best here (as many threads as "
              f"cores, the tables in memory, in process with no result transfer), so default and best are the same "
              f"run (as in the SQL section). " + benchutil.settle_text()
              + (f"**The machine did not get quiet** before timing {', '.join(busy)}. " if busy else "")
              + f"Load average {load_before:.2f} when the benchmark started"
              f"{' (noisy: over half the cores were busy with other work)' if load_before > cores * 0.5 else ''}, "
              f"{load_after:.2f} after its queries (their own load included).\n",
              "| symbol | trades | quotes | tickdb | QuestDB default | QuestDB best | DuckDB | best QuestDB / tickdb | DuckDB / tickdb |",
              "|---|---|---|---|---|---|---|---|---|"]
        met = []
        for label, sym, r in rows:
            t = r["tickdb"][0]
            qd = bq.fmt_s(r["questdb"][0]) if "questdb" in r else "n/a"
            qb = f"{bq.fmt_s(r['questdb_best'][0])} (`{r['hint']}`)" if "questdb_best" in r else "n/a"
            best_q = min([r[k][0] for k in ("questdb", "questdb_best") if k in r], default=None)
            ratio_q = f"{best_q / t:.2f}x" if best_q else "n/a"
            nt, nq = floors[sym].trades, floors[sym].quotes
            md.append(f"| {label} ({sym}) | {nt:,} | {nq:,} | {bq.fmt_s(t)} | {qd} | {qb} | "
                      f"{bq.fmt_s(r['duckdb'][0])} | {ratio_q} | {r['duckdb'][0] / t:.2f}x |")
            floor_s = floor_time(sum(floors[sym].layout.values()), rate, round_trip)
            verdict = "met" if t * 1000 < TARGET_MS else "missed"
            if t * 1000 >= TARGET_MS and floor_s * 1000 >= TARGET_MS:
                verdict += (f"; tickdb's layout makes it at least {bq.fmt_s(floor_s)}: "
                            f"{bq.fmt_s(floor_s - round_trip)} of reads at this machine's streaming rate and the "
                            f"{bq.fmt_s(round_trip)} round trip of `select 1`, below")
            met.append(f"{label} {bq.fmt_s(t)} ({verdict})")
        md.append("")
        md.append("All systems returned the same count and sum for every query, and so did numpy over the rows "
                  "sent." if not disagree else "The systems DISAGREED: " + "; ".join(disagree))
        md.append("")
        md.append(floor_text(rows, floors, rate, cores, round_trip))
        md.append("")
        md.append(f"Target: the monitor query under {TARGET_MS:.0f} ms on a 50M-row rdb: " + "; ".join(met) +
                  ". The query's time grows with the symbol's rows: the most active symbol's trades are each "
                  "answered, and its quotes read, so it is bounded by that symbol's share of the day, not by the "
                  "rdb's size. Ratios above 1 mean tickdb is faster.")
        text = "\n".join(md) + "\n"
        if a.out:
            benchutil.write_section(Path(a.out), SECTION, text, REGEN_LINE)
            log(f"wrote {a.out}")
        else:
            print(text)
        return 1 if disagree else 0
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
