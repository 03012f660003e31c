"""What the Python benchmarks share: free loopback ports, loading a
DataFrame into a server through the `questdb` ILP client, waiting for the
machine to be quiet before timing, what machine they ran on, and replacing
one section of docs/benchmarks.md in place."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
import time
from typing import Callable, TypeVar

import pandas as pd
import requests
from questdb.ingress import Sender

# Rows per ILP HTTP request.
LOAD_STEP_ROWS = 100_000

T = TypeVar("T")


def machine(work: Path) -> dict:
    """What `tickdb bench report` says in its Machine section
    (crates/bench/src/machine.rs): CPU, cores, RAM, kernel, the file system
    of `work`, and the load average now."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ram_kib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_kib = float(line.split()[1])
    except OSError:
        pass
    try:
        out = subprocess.run(["df", "--output=fstype,source", str(work)], capture_output=True, text=True).stdout
        fs = " on ".join(out.splitlines()[1].split())
    except (OSError, IndexError):
        fs = "unknown"
    return {"cpu": cpu, "cores": cores, "ram_gib": ram_kib / 1024 / 1024, "kernel": os.uname().release,
            "fs": fs, "loadavg_start": os.getloadavg()[0]}


def machine_text(m: dict) -> str:
    """The machine in words, as the sections state it."""
    return f"{m['cpu']} ({m['cores']} cores), {m['ram_gib']:.1f} GiB RAM, Linux {m['kernel']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How many times a server is started again, on fresh ports, when a port
# free_port() chose was taken by another process before the server bound it.
PORT_RACE_TRIES = 5


class PortTaken(Exception):
    """The server exited because a port it was given was already in use."""


def lost_port_race(log: Path, since: int) -> bool:
    """Whether the server's log, from byte `since` on (what this start
    wrote), says a port it was given was already in use."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            return b"address already in use" in f.read().lower()
    except OSError:
        return False


def wait_ready(p, url: str, log: Path, log_start: int, what: str, ready_s: float) -> None:
    """Waits until `url` answers 200. If the process `p` exits first, raises
    PortTaken when its log since `log_start` says a port was in use (for
    start_retrying), SystemExit otherwise; SystemExit after `ready_s`."""
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            if lost_port_race(log, log_start):
                raise PortTaken(f"{what} found a port taken")
            raise SystemExit(f"{what} exited with {p.returncode}; see {log}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} not ready after {ready_s:.0f}s; see {log}")


def start_retrying(start: Callable[[], T], what: str) -> T:
    """start(), again on fresh ports while it raises PortTaken (free_port's
    race: a port can be taken between choosing it and binding it)."""
    for attempt in range(1, PORT_RACE_TRIES + 1):
        try:
            return start()
        except PortTaken as e:
            print(f"[bench] {what}: {e}; starting it again on other ports ({attempt}/{PORT_RACE_TRIES})",
                  file=sys.stderr, flush=True)
    raise SystemExit(f"{what}: a port was taken at each of {PORT_RACE_TRIES} starts")


# A machine counts as quiet when a SETTLE_WINDOW_S window of /proc/stat has
# at least SETTLE_IDLE of its CPU time idle; settle() waits at most
# SETTLE_WAIT_MAX_S for one.
SETTLE_IDLE = 0.9
SETTLE_WINDOW_S = 0.5
SETTLE_WAIT_MAX_S = 30.0


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is in user)
    idle = fields[3] + fields[4]
    return idle, sum(fields[:8])


def settle() -> tuple[float, float]:
    """Waits until the machine is quiet (see SETTLE_IDLE), so that a
    system is not timed while another one (a JVM compiling or collecting,
    a server still merging what it was loaded with) works on the same
    cores. Returns (seconds waited, idle share of the last window): a share
    under SETTLE_IDLE means it gave up after SETTLE_WAIT_MAX_S."""
    t0 = time.monotonic()
    while True:
        i0, n0 = _cpu_times()
        time.sleep(SETTLE_WINDOW_S)
        i1, n1 = _cpu_times()
        idle = (i1 - i0) / max(1, n1 - n0)
        waited = time.monotonic() - t0
        if idle >= SETTLE_IDLE or waited >= SETTLE_WAIT_MAX_S:
            return waited, idle


def quiet(system: str, what: str, busy: list[str], log: Callable[[str], None]) -> None:
    """settle() before timing `system` on `what`; when the machine did not
    get quiet, says so in the log and adds it to `busy` for the report."""
    waited, idle = settle()
    if idle < SETTLE_IDLE:
        busy.append(f"{system} ({what}, {idle:.0%} idle)")
        log(f"  the machine did not get quiet before timing {system} on {what}: {idle:.0%} idle")
    elif waited > 1.0:
        log(f"  waited {waited:.1f} s for the machine to be quiet before timing {system}")


def settle_text() -> str:
    """The report's sentence on settle(), for every benchmark that uses it."""
    return (f"Each system is timed once the machine is quiet (a {SETTLE_WINDOW_S:g} s window with at least "
            f"{SETTLE_IDLE:.0%} of the CPU idle, waited for up to {SETTLE_WAIT_MAX_S:.0f} s), not while the work of "
            f"the system timed before it winds down (QuestDB's JVM, DuckDB's threads, on the same cores). ")


# Sums of doubles differ in their last bits between systems that add in
# different orders; a larger difference is a different answer.
SUM_REL_TOLERANCE = 1e-6


def same_answers(answers: dict[str, object]) -> bool:
    """Whether every system's answer (one result row: counts and sums) is the
    same, column by column: counts exactly, sums to SUM_REL_TOLERANCE. A
    missing row or a row of another width is a different answer."""
    rows = [tuple(r) if r is not None else None for r in answers.values()]
    if any(r is None for r in rows) or len({len(r) for r in rows}) != 1:
        return len(set(rows)) <= 1
    for col in zip(*rows):
        if any(v is None for v in col):
            if any(v is not None for v in col):
                return False
            continue
        if all(isinstance(v, int) for v in col):
            if len(set(col)) != 1:
                return False
            continue
        xs = [float(v) for v in col]
        if max(xs) - min(xs) > SUM_REL_TOLERANCE * max(1.0, max(abs(x) for x in xs)):
            return False
    return True


def load_ilp(http_port: int, df: pd.DataFrame, table: str,
             progress: Callable[[int, int, float], None] | None = None) -> float:
    """Sends df (with `sym` and `time` columns) through the questdb client
    in LOAD_STEP_ROWS-row HTTP requests, each flushed (acknowledged) before
    the next; calls progress(done, total, seconds) after each. Seconds."""
    t = time.monotonic()
    with Sender.from_conf(f"http::addr=127.0.0.1:{http_port};auto_flush=off;request_timeout=120000;") as s:
        for i in range(0, len(df), LOAD_STEP_ROWS):
            s.dataframe(df.iloc[i:i + LOAD_STEP_ROWS], table_name=table, symbols=["sym"], at="time")
            s.flush()
            if progress is not None:
                progress(min(i + LOAD_STEP_ROWS, len(df)), len(df), time.monotonic() - t)
    return time.monotonic() - t


def write_section(path: Path, section: str, text: str, regen_line: str) -> None:
    """Replaces the section `section` (its `## ` heading line, to the next
    `## ` heading) in place with `text`, or appends it; makes sure the
    header (before the first section) has `regen_line`, which names the
    command that regenerates the section alone."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = doc.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if l.rstrip("\n") == section), None)
    if start is None:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        doc = "".join(lines[:start]) + text + ("\n" + tail if tail else "")
    if regen_line not in doc:
        i = doc.find("\n## ")
        if i < 0:
            doc = doc.rstrip("\n") + "\n\n" + regen_line + "\n"
        else:
            doc = doc[:i].rstrip("\n") + "\n\n" + regen_line + "\n" + doc[i:]
    path.write_text(doc)
