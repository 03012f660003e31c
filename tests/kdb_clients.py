"""Installs the kdb+ IPC clients the tests use, each from its public
registry, into a cache directory (TICKDB_TEST_CACHE, default
~/.cache/tickdb-test): javakdb from Maven Central (compiled against with
the JDK's javac) and node-q from npm. PyKX and aiokdb come from PyPI with
the other Python packages (tests/requirements.txt). A client that cannot be
installed skips its tests, saying why."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("TICKDB_TEST_CACHE", Path.home() / ".cache" / "tickdb-test"))
HERE = Path(__file__).parent / "ipc_clients"
JAVAKDB_VERSION = "2.0"
JAVAKDB_URL = (f"https://repo1.maven.org/maven2/com/kx/javakdb/{JAVAKDB_VERSION}/"
               f"javakdb-{JAVAKDB_VERSION}.jar")
NODE_Q_VERSION = "2.7.0"


def javakdb() -> tuple[str | None, str]:
    """(classpath holding javakdb and the compiled KdbJava client, or None;
    why not)."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return None, f"{tool} is not installed (Java 17)"
    CACHE.mkdir(parents=True, exist_ok=True)
    jar = CACHE / f"javakdb-{JAVAKDB_VERSION}.jar"
    if not jar.exists():
        try:
            with urllib.request.urlopen(JAVAKDB_URL, timeout=60) as r:
                data = r.read()
            # Maven Central publishes a SHA-1 beside every artifact.
            with urllib.request.urlopen(JAVAKDB_URL + ".sha1", timeout=60) as r:
                want = r.read().decode().split()[0]
            if hashlib.sha1(data).hexdigest() != want:
                return None, f"{JAVAKDB_URL}: checksum mismatch"
            tmp = jar.with_suffix(".part")
            tmp.write_bytes(data)
            tmp.replace(jar)
        except OSError as e:
            return None, f"downloading {JAVAKDB_URL}: {e}"
    src = HERE / "KdbJava.java"
    out = CACHE / "javac"
    stamp = out / (hashlib.sha1(src.read_bytes()).hexdigest() + ".built")
    if not stamp.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        r = subprocess.run(["javac", "-d", str(out), "-cp", str(jar), str(src)],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            return None, f"javac KdbJava.java failed: {r.stderr}"
        stamp.touch()
    return f"{jar}{os.pathsep}{out}", ""


def node_q() -> tuple[str | None, str]:
    """(a NODE_PATH holding node-q, or None; why not)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return None, f"{tool} is not installed"
    d = CACHE / f"node-q-{NODE_Q_VERSION}"
    mods = d / "node_modules"
    if not (mods / "node-q").exists():
        d.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund",
                            "--prefix", str(d), f"node-q@{NODE_Q_VERSION}"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not (mods / "node-q").exists():
            return None, f"npm install node-q@{NODE_Q_VERSION} failed: {r.stderr[-2000:]}"
    return str(mods), ""
