"""The PostgreSQL clients of `tickdb bench sharding`'s query-throughput
section (written out and run by the benchmark; not meant to be run alone).

For each port given, CLIENTS processes (multiprocessing, fork) run QUERY
with psycopg for SECONDS: each opens a connection, asks
`select pg_backend_pid()` (which member it reached), runs QUERY up to
PER_CONN times, closes, and starts again. Queries that finish before the
phase ends are counted. One JSON line per port goes to OUT.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time


def worker(port, query, per_conn, start_at, end_at, out, idx):
    import psycopg

    done, conns, errors, pids, sample, shapes = 0, 0, [], {}, None, set()
    while time.time() < start_at:
        time.sleep(0.001)
    while time.time() < end_at:
        try:
            with psycopg.connect(host="127.0.0.1", port=port, user="tickdb", password="tickdb",
                                 dbname="tickdb", autocommit=True, connect_timeout=10) as c:
                conns += 1
                pid = c.execute("select pg_backend_pid()").fetchone()[0]
                pids[str(pid)] = pids.get(str(pid), 0) + 1
                for _ in range(per_conn):
                    if time.time() >= end_at:
                        break
                    rows = c.execute(query).fetchall()
                    if time.time() <= end_at:
                        done += 1
                    shapes.add(len(rows))
                    if sample is None:
                        sample = [list(r) for r in rows]
        except Exception as e:  # noqa: BLE001 - reported to the benchmark
            errors.append(f"{type(e).__name__}: {e}".strip())
            time.sleep(0.01)
    out.put({"idx": idx, "queries": done, "connections": conns, "errors": errors[:5],
             "error_count": len(errors), "pids": pids, "sample": sample, "row_counts": sorted(shapes)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", required=True, help="comma-separated PostgreSQL ports, one phase each")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--per-conn", type=int, required=True)
    ap.add_argument("--query", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import psycopg  # noqa: F401 - fail here, before any phase, when missing

    ctx = mp.get_context("fork")
    with open(a.out, "w") as f:
        for port in [int(p) for p in a.ports.split(",")]:
            q = ctx.Queue()
            start_at = time.time() + 0.5
            end_at = start_at + a.seconds
            ps = [ctx.Process(target=worker, args=(port, a.query, a.per_conn, start_at, end_at, q, i))
                  for i in range(a.clients)]
            print(f"phase port {port}: {a.clients} clients for {a.seconds} s", file=sys.stderr, flush=True)
            for p in ps:
                p.start()
            results = [q.get(timeout=a.seconds + 120) for _ in ps]
            for p in ps:
                p.join(timeout=30)
            results.sort(key=lambda r: r["idx"])
            pids = {}
            for r in results:
                for k, v in r["pids"].items():
                    pids[k] = pids.get(k, 0) + v
            errors = [e for r in results for e in r["errors"]]
            line = {
                "port": port,
                "seconds": a.seconds,
                "clients": a.clients,
                "queries": sum(r["queries"] for r in results),
                "connections": sum(r["connections"] for r in results),
                "pids": pids,
                "error_count": sum(r["error_count"] for r in results),
                "errors": errors[:5],
                "sample": next((r["sample"] for r in results if r["sample"] is not None), None),
                "row_counts": sorted({n for r in results for n in r["row_counts"]}),
            }
            f.write(json.dumps(line) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
