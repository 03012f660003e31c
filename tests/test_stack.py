"""The market-data test stack of the Optane kdb+ study and the bulk insert of Zero-Impact Crash Recovery for kdb+, end to
end over the real binary: tickdb feed, agg and monitor as separate
processes; `tickdb bench stack` and `tickdb bench insert` in short runs;
Ctrl-C on `bench stack` leaves no process behind.

The agg's bars are checked against bars computed independently, with
DuckDB, from the raw trades and quotes pulled from the rdb.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import requests

from harness import BIN, free_port, run

NS_PER_MINUTE = 60_000_000_000
NS_PER_DAY = 86_400 * 1_000_000_000


def arrow(rdb, sql: str):
    r = requests.get(rdb.url + "/exec", params={"query": sql, "format": "arrow"}, timeout=60)
    assert r.status_code == 200, r.text
    return pa.ipc.open_stream(r.content).read_all()


def frame(rdb, table: str):
    """A table as pandas, times as int64 ns and symbols as strings."""
    df = arrow(rdb, f"select * from {table}").to_pandas()
    for c in df.columns:
        if str(df[c].dtype).startswith("datetime64"):
            df[c] = df[c].astype("int64")
        elif str(df[c].dtype) == "category":
            df[c] = df[c].astype(str)
    return df


def close(a, b, rel=1e-9) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


def compare(got, want, key: list[str], exact: list[str], approx: list[str], what: str):
    g = {tuple(r[k] for k in key): r for r in got.to_dict("records")}
    w = {tuple(r[k] for k in key): r for r in want.to_dict("records")}
    assert g.keys() == w.keys(), f"{what}: keys differ: only agg {sorted(g.keys() - w.keys())[:5]}, only raw {sorted(w.keys() - g.keys())[:5]}"
    for k, wr in w.items():
        gr = g[k]
        for c in exact:
            assert gr[c] == wr[c], f"{what} {k} {c}: agg {gr[c]} raw {wr[c]}"
        for c in approx:
            assert close(gr[c], wr[c]), f"{what} {k} {c}: agg {gr[c]} raw {wr[c]}"


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = cond()
        if ok:
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: {last}")


def test_agg_bars_equal_bars_computed_from_the_raw_trades(cluster, tmp_path, rng):
    seed = rng.randrange(1 << 32)
    print(f"feed seed {seed}")
    tp = cluster.tp(extra=["--fsync", "never", "--publish-interval-ms", "20"])
    rdb = cluster.rdb(tp.tp_port)
    feed = cluster.raw(
        ["feed", "--ilp-port", str(tp.ilp_port), "--http-port", str(tp.http_port), "--rate", "4000",
         "--duration", "4", "--prestress", "3000", "--symbols", "200", "--seed", str(seed),
         "--summary", str(tmp_path / "feed.json")],
        role="feed",
    )
    # The agg starts after the feed: it replays the journal first, then
    # follows live, and its bars must cover both.
    time.sleep(1.0)
    # Each is given a list whose first address has nobody listening (a dead
    # node of a failover group): it must go on to the next.
    dead = free_port()
    cluster.raw(["agg", "--tp", f"127.0.0.1:{dead},127.0.0.1:{tp.tp_port}", "--publish-ms", "50"],
                role="agg")
    mon = cluster.raw(
        ["monitor", "--rdb", f"127.0.0.1:{dead},127.0.0.1:{rdb.http_port}", "--every-ms", "200",
         "--duration", "2",
         "--out", str(tmp_path / "mon"), "--label", "test <rdb>"],
        role="monitor",
    )
    assert feed.wait_exit(60) == 0, feed.log_tail()
    fs = json.loads((tmp_path / "feed.json").read_text())
    assert fs["seed"] == seed and fs["prestress_rows"] == 3000
    n_trades, n_quotes = fs["trades"], fs["quotes"]
    assert n_trades > 0 and abs(n_quotes - 10 * n_trades) <= 10, fs

    # Every tick is in the rdb, and folded: once the feed has stopped the
    # last minute is no longer open, so every bar is final and comparable.
    def folded():
        got = (
            rdb.scalar("select count(*) from trade"),
            rdb.scalar("select count(*) from quote"),
            rdb.scalar("select coalesce(sum(trades), 0) from trade_1m"),
            rdb.scalar("select coalesce(sum(quotes), 0) from quote_1m"),
            rdb.scalar("select coalesce(sum(trades), 0) from daily"),
        )
        return got == (n_trades, n_quotes, n_trades, n_quotes, n_trades), got
    wait_for(folded, 30, "the agg did not fold every tick")

    trades = frame(rdb, "trade")
    quotes = frame(rdb, "quote")
    assert (quotes["bid"] < quotes["ask"]).all()
    # The feed stamps strictly increasing generation times, so "first" and
    # "last" in a bar mean the same by time as by arrival.
    assert trades["time"].is_unique and quotes["time"].is_unique
    con = duckdb.connect()
    con.register("trades", trades)
    con.register("quotes", quotes)
    want_t = con.execute(f"""
        select sym, "time" - "time" % {NS_PER_MINUTE} as "time",
               arg_min(price, "time") as open, max(price) as high, min(price) as low,
               arg_max(price, "time") as close, sum(size) as volume,
               sum(price * size) / sum(size) as vwap, count(*) as trades, max("time") as last_time
        from trades group by all""").df()
    want_q = con.execute(f"""
        select sym, "time" - "time" % {NS_PER_MINUTE} as "time", count(*) as quotes,
               arg_max(bid, "time") as bid, arg_max(ask, "time") as ask,
               arg_min((bid + ask) / 2, "time") as mid_open, max((bid + ask) / 2) as mid_high,
               min((bid + ask) / 2) as mid_low, arg_max((bid + ask) / 2, "time") as mid_close,
               avg(ask - bid) as avg_spread, max("time") as last_time
        from quotes group by all""").df()
    # Daily stats cover each symbol's latest UTC day.
    want_d = con.execute(f"""
        with t as (select *, "time" - "time" % {NS_PER_DAY} as day from trades
                   qualify day = max(day) over (partition by sym)),
             q as (select *, "time" - "time" % {NS_PER_DAY} as day from quotes
                   qualify day = max(day) over (partition by sym)),
             ts as (select sym, arg_min(price, "time") as open, max(price) as high, min(price) as low,
                           arg_max(price, "time") as close, sum(size) as volume,
                           sum(price * size) / sum(size) as vwap, count(*) as trades, max("time") as tl
                    from t group by sym),
             qs as (select sym, count(*) as quotes, avg(ask - bid) as avg_spread,
                           arg_max(bid, "time") as bid, arg_max(ask, "time") as ask, max("time") as ql
                    from q group by sym)
        select coalesce(ts.sym, qs.sym) as sym, open, high, low, close, volume, vwap,
               coalesce(trades, 0) as trades, coalesce(quotes, 0) as quotes, avg_spread, bid, ask,
               greatest(coalesce(tl, 0), coalesce(ql, 0)) as last_time
        from ts full join qs on ts.sym = qs.sym""").df()

    got_t = frame(rdb, "trade_1m")
    got_q = frame(rdb, "quote_1m")
    got_d = frame(rdb, "daily")
    assert len(got_t) == len(want_t) > 0
    compare(got_t, want_t, ["sym", "time"], ["open", "high", "low", "close", "volume", "trades", "last_time"],
            ["vwap"], "trade_1m")
    compare(got_q, want_q, ["sym", "time"],
            ["quotes", "bid", "ask", "mid_open", "mid_high", "mid_low", "mid_close", "last_time"],
            ["avg_spread"], "quote_1m")
    got_d = got_d.astype({"trades": "int64", "quotes": "int64"})
    want_d = want_d.astype({"trades": "int64", "quotes": "int64"})
    for c in ("open", "high", "low", "close", "vwap", "avg_spread", "bid", "ask"):
        got_d[c] = got_d[c].astype(object).where(got_d[c].notna(), None)
        want_d[c] = want_d[c].astype(object).where(want_d[c].notna(), None)
    compare(got_d, want_d, ["sym"], ["open", "high", "low", "close", "trades", "quotes", "bid", "ask", "last_time"],
            ["vwap", "avg_spread"], "daily")
    # The agg publishes a bar after the ticks in it were generated.
    assert (got_t["pub_time"] >= got_t["last_time"]).all()

    # The monitor ran alongside: its CSV, summary and plots.
    assert mon.wait_exit(60) == 0, mon.log_tail()
    out = tmp_path / "mon"
    lines = (out / "monitor.csv").read_text().splitlines()
    assert lines[0].startswith("unix_ms,elapsed_s,trade_latency_ms,quote_latency_ms")
    assert len(lines) >= 4, lines
    # The first poll reads only rows newer than what the monitor learnt
    # before it: not every row already loaded, which would time that scan.
    first = dict(zip(lines[0].split(","), lines[1].split(",")))
    new_rows = int(first["new_trade_rows"]) + int(first["new_quote_rows"])
    all_rows = int(first["trade_rows"]) + int(first["quote_rows"])
    assert all_rows > 3000 and new_rows < all_rows / 2, first
    s = json.loads((out / "summary.json").read_text())
    assert s["polls"] == len(lines) - 1 and s["errors"] == 0
    for k in ("trade_latency_ms", "quote_latency_ms", "agg_trade_latency_ms", "asof_ms"):
        st = s[k]
        assert st["n"] > 0 and 0 < st["mean"] <= st["max"] < 30_000, (k, st)
    assert s["queries_per_minute"] > 0 and s["asof_rows_last"] > 0 and s["asof_sym"]
    assert s["dram_bytes_max"] > 0 and s["rss_bytes_max"] > s["dram_bytes_max"] / 2
    for svg in ("latency.svg", "memory.svg"):
        root = ET.parse(out / svg).getroot()  # well-formed XML
        assert root.tag.endswith("svg")
    assert "test &lt;rdb&gt;" in (out / "latency.svg").read_text()


def fmt_ms(x: float) -> str:
    """A latency as the report writes it (`ms` in crates/bench/src/stack.rs)."""
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    if x >= 100:
        return f"{x:.0f} ms"
    return f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms"


def stack_rows(md: str, label: str) -> list[str]:
    return [l for l in md.splitlines() if l.startswith(f"| {label} |")]


def test_bench_stack_report_has_every_row_and_plausible_latencies(tmp_path):
    out = tmp_path / "stack.json"
    r = run(["bench", "stack", "--seconds", "3", "--rate", "2000", "--prestress", "5000", "--symbols", "300",
             "--timers", "200:50", "--fsmem-rdbs", "2", "--runs", "2", "--json", str(out),
             "--work-dir", str(tmp_path / "work")],
            timeout=420)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    head1, head2 = "### Test 1: a DRAM rdb against an fsmem rdb", "### Test 2: 2 DRAM rdbs against 2 fsmem rdbs"
    assert head1 in md and head2 in md, md
    test1 = md[md.index(head1):md.index(head2)]
    test2 = md[md.index(head2):]
    # Test 1: one row per measure for the one scenario, with monitor timer,
    # tp timer, DRAM, fsmem and the comparison factor.
    for label in ("Max latency", "Mean latency", "Max aggregated-row latency", "Bytes in memory (tables in DRAM)",
                  "RSS anonymous (process DRAM)", "Average query time", "Queries per minute"):
        rows = stack_rows(test1, label)
        assert len(rows) == 1, (label, test1)
        cells = [c.strip() for c in rows[0].split("|")[1:-1]]
        assert cells[1:3] == ["200 ms", "50 ms"] and len(cells) == 6 and all(cells), rows
    for label in ("Max latency", "Max aggregated-row latency", "% of the machine's DRAM used (RSS anonymous)",
                  "Bytes in memory (tables in DRAM)", "Average query time", "Total queries per minute"):
        rows = stack_rows(test2, label)
        assert len(rows) == 1 and len(rows[0].split("|")) == 6, (label, test2)
    # Two runs of everything: 2 + 4 stacks each.
    assert "Aggregation check: in all 12 stacks" in md, md
    assert "Targets (reported, not asserted)" in md

    rep = json.loads(out.read_text())
    (t1,) = rep["test1"]
    t2 = rep["test2"]
    assert len(t1["dram"]) == len(t1["fsmem"]) == 2 and len(t2["runs"]) == 2
    stacks = [*t1["dram"], *t1["fsmem"], *(s for run in t2["runs"] for s in run["dram"] + run["fsmem"])]
    assert [s["placement"] for s in stacks] == ["dram"] * 2 + ["fsmem"] * 2 + ["dram", "dram", "fsmem", "fsmem"] * 2
    # Each figure is the median of the runs: with two, the mean of both.
    maxima = {p: [max(s["monitor"]["trade_latency_ms"]["max"], s["monitor"]["quote_latency_ms"]["max"])
                  for s in t1[p]] for p in ("dram", "fsmem")}
    cells = [c.strip() for c in stack_rows(test1, "Max latency")[0].split("|")[1:-1]]
    for p, cell in (("dram", cells[3]), ("fsmem", cells[4])):
        assert cell == fmt_ms(sum(maxima[p]) / 2), (p, cell, maxima[p])
    assert "Each figure is the median over 2 runs of its scenario" in test1, test1
    assert "Each figure is the median over 2 runs of Test 2" in test2, test2
    for s in stacks:
        m = s["monitor"]
        assert s["bars_ok"], s["bars_note"]
        assert m["errors"] == 0 and m["polls"] > 0
        for k in ("trade_latency_ms", "quote_latency_ms", "agg_trade_latency_ms", "agg_quote_latency_ms"):
            st = m[k]
            # Positive, and within what a loaded 2-core machine running a debug build can be asked for.
            assert st["n"] > 0 and 0 < st["mean"] <= st["max"] < 20_000, (s["name"], k, st)
        assert 0 < m["asof_ms"]["mean"] < 5_000 and m["queries_per_minute"] > 0
        assert m["asof_rows_last"] > 0
        assert s["feed"]["rate_achieved"] > 1500 and s["prestress"]["prestress_rows"] == 5000
    # With a 1 s tp timer the newest row is up to a second old: the timer is in effect.
    assert max(s["monitor"]["quote_latency_ms"]["max"] for run in t2["runs"] for s in run["dram"] + run["fsmem"]) > 200
    # fsmem rdbs keep their tables out of the DRAM domain. Symbol tables stay
    # in DRAM for every table (docs/schema.md), so an fsmem rdb's DRAM is
    # small but not nothing: here about 1/22 of the DRAM rdb's, a margin too
    # thin to assert at 1/20.
    dram, fsmem = t1["dram"][0]["monitor"], t1["fsmem"][0]["monitor"]
    assert dram["dram_bytes_max"] > 0 and fsmem["fsmem_bytes_max"] > 0
    assert fsmem["dram_bytes_max"] < dram["dram_bytes_max"] / 10, (dram, fsmem)
    assert fsmem["dram_bytes_max"] < fsmem["fsmem_bytes_max"] / 10, fsmem


def test_bench_stack_scale_reports_one_stack_at_the_study_sizes_scaled_down(tmp_path):
    """`--scale` with its sizes overridden, in two runs: one DRAM stack each,
    its preload complete, and the subsection with each run's column and the
    medians, bytes per row of trade and quote from the rdb's per-table
    figures."""
    out = tmp_path / "scale.json"
    r = run(["bench", "stack", "--scale", "--runs", "2", "--prestress", "200k", "--seconds", "3", "--rate", "5000",
             "--symbols", "300", "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    assert "### The study's scale on one stack" in md and "### Test 1" not in md, md
    assert "| | run 1 | run 2 | median (min–max) |" in md, md
    assert "2 runs (`--runs`), one after the other" in md, md
    for label in ("Prestress", "Rows at the end", "Bytes per row in memory: trade", "Bytes per row in memory: quote",
                  "The agg's tables in memory", "Max tick latency", "Mean tick latency", "Max aggregated-row latency",
                  "As-of query time", "RSS of the rdb (max)", "Achieved feed rate"):
        rows = stack_rows(md, label)
        assert len(rows) == 1 and "n/a" not in rows[0], (label, md)
        assert len(rows[0].split("|")[1:-1]) == 4, rows
    assert "stopped short" not in md and "Aggregation check: passed in every run" in md, md

    rep = json.loads(out.read_text())
    assert not rep["test1"] and rep["test2"] is None
    sc = rep["scale"]
    assert sc["rate"] == 5000 and sc["seconds"] == 3 and len(sc["runs"]) == 2
    per_row = {"trade": [], "quote": []}
    for s in sc["runs"]:
        assert s["placement"] == "dram" and s["timers"] == {"monitor_ms": 300, "tp_ms": 50}
        load = s["prestress_load"]
        assert load["asked_rows"] == 200_000 and load["rows"] == 200_000 and load["stopped"] is None, load
        assert load["seconds"] > 0
        tables = {t["name"]: t for t in s["tables"]}
        # 28 bytes of columns and 4 of index a trade, 44 and 4 a quote, plus the
        # dictionary and each table's unwritten rest of its newest chunk.
        for name, least in (("trade", 28), ("quote", 44)):
            t = tables[name]
            assert t["rows"] > 0 and t["fsmem_bytes"] == 0, t
            assert least <= t["dram_bytes"] / t["rows"] < 200, t
            per_row[name].append(t["dram_bytes"] / t["rows"])
        m = s["monitor"]
        assert m["rss_bytes_max"] >= m["rss_anon_bytes_max"] > 0
        assert m["asof_ms"]["n"] > 0 and s["feed"]["rate_achieved"] > 4000
    # The medians column: bytes per row, the median of the two runs.
    for name in ("trade", "quote"):
        cells = [c.strip() for c in stack_rows(md, f"Bytes per row in memory: {name}")[0].split("|")[1:-1]]
        lo, hi = sorted(per_row[name])
        assert cells[3].startswith(f"{(lo + hi) / 2:.1f} B"), (cells, lo, hi)


def test_bench_stack_zero_latency_runs_one_stack_at_a_time(tmp_path):
    """`--zero-latency RUNS`: a DRAM and an fsmem stack alternating, each
    with a zero tp timer; every run's max in the table beside the medians,
    and the targets line quoting them."""
    out = tmp_path / "zl.json"
    r = run(["bench", "stack", "--zero-latency", "2", "--prestress", "20k", "--seconds", "2", "--rate", "5000",
             "--symbols", "300", "--json", str(out), "--work-dir", str(tmp_path / "work")], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    md = r.stdout
    assert "### Zero latency at 5,000 updates/s" in md and "### Test 1" not in md, md
    rep = json.loads(out.read_text())
    assert not rep["test1"] and rep["test2"] is None and rep["scale"] is None
    zl = rep["zero_latency"]
    assert zl["rate"] == 5000 and zl["prestress"] == 20_000 and zl["timers"] == {"monitor_ms": 50, "tp_ms": 0}
    for placement in ("dram", "fsmem"):
        runs = zl[placement]
        assert len(runs) == 2, runs
        maxima = []
        for s in runs:
            assert s["placement"] == placement and s["timers"] == {"monitor_ms": 50, "tp_ms": 0}
            m = s["monitor"]
            assert m["trade_latency_ms"]["n"] > 0 and m["quote_latency_ms"]["n"] > 0, m
            maxima.append(max(m["trade_latency_ms"]["max"], m["quote_latency_ms"]["max"]))
            assert s["bars_ok"], s["bars_note"]
        label = "DRAM" if placement == "dram" else "fsmem"
        row = stack_rows(md, label)
        assert len(row) == 1, md
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        assert len(cells[1].split(", ")) == 2 and "n/a" not in row[0], row
    assert "- Zero-latency mode under 5 ms max: " in md and "the median of 2 runs each" in md, md
    # Its own mode: no Test 1 timers, no --scale beside it, at least one run.
    for bad, why in ((["--zero-latency", "0"], "0 is not in 1.."),
                     (["--zero-latency", "--scale"], "cannot be used with '--scale'"),
                     (["--zero-latency", "--timers", "50:0"], "cannot be used with '--timers")):
        r = run(["bench", "stack", *bad, "--work-dir", str(tmp_path / "bad")], timeout=60)
        assert r.returncode != 0 and why in r.stderr, (bad, r.stderr)


def test_bench_insert_reports_throughput_and_server_samples(tmp_path):
    out = tmp_path / "insert.json"
    r = run(["bench", "insert", "--rows", "60000", "--no-questdb", "--json", str(out),
             "--work-dir", str(tmp_path / "work")], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert stack_rows(r.stdout, "tickdb up --fsync never") and stack_rows(r.stdout, "tickdb up --fsync always"), r.stdout
    assert "`dd conv=fdatasync`" in r.stdout
    rep = json.loads(out.read_text())
    assert [c["server"] for c in rep["cases"]] == ["tickdb up --fsync never", "tickdb up --fsync always"]
    for c in rep["cases"]:
        res = c["result"]
        assert res["rows"] == 60000 and res["rows_s"] > 0 and res["mb_s"] > 0
        assert res["samples"] and all(s["rss_bytes"] > 0 and s["cpu_pct"] >= 0 for s in res["samples"])
        assert c["journal_bytes"] > 0


def _children_of(pid: int) -> dict[int, str]:
    """Direct children of pid: {child pid: its start time} (start times
    tell a reused pid apart)."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            kids[int(d)] = fields[19]
    return kids


def _alive(pid: int, start: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] == start and fields[0] != "Z"


def _using(path: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if path in cmd:
                pids.append(int(d))
    return pids


def test_ctrl_c_on_bench_stack_leaves_no_process(tmp_path):
    work = tmp_path / "work"
    p = subprocess.Popen(
        [BIN, "bench", "stack", "--seconds", "120", "--rate", "1000", "--prestress", "1000", "--symbols", "100",
         "--timers", "300:50", "--tests", "1", "--work-dir", str(work)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        seen: dict[int, str] = {}
        deadline = time.monotonic() + 90
        # Both stacks are measuring once their monitors run: 2 × (tp, rdb,
        # agg, feed, monitor).
        while time.monotonic() < deadline:
            seen.update(_children_of(p.pid))
            if (work / "t1-1-m300-tp50-r1-fsmem" / "monitor.log").exists() and len(_children_of(p.pid)) >= 10:
                break
            assert p.poll() is None, p.communicate()[1][-3000:]
            time.sleep(0.1)
        else:
            raise AssertionError(f"the stacks did not start: {len(seen)} children")
        time.sleep(0.5)
        seen.update(_children_of(p.pid))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0
        assert "interrupted" in err, err[-2000:]
        time.sleep(0.3)
        left = [pid for pid, start in seen.items() if _alive(pid, start)]
        assert not left, f"children still alive after Ctrl-C: {left}"
        assert not _using(str(work)), f"processes still using {work}: {_using(str(work))}"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
