import os
import random
import time

import pytest

from harness import BIN, Cluster


def pytest_configure(config):
    if not os.path.exists(BIN):
        raise pytest.UsageError(f"tickdb binary not found at {BIN}: build it (scripts/test.sh does) or set TICKDB_BIN")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        cl = item.funcargs.get("cluster")
        if cl is not None:
            rep.sections.append(("tickdb logs", cl.logs()))


@pytest.fixture
def cluster(tmp_path):
    cl = Cluster(tmp_path)
    try:
        yield cl
    finally:
        cl.teardown()


@pytest.fixture
def rng(request):
    """A seeded RNG; the seed is printed and TICKDB_SEED reproduces it."""
    seed = int(os.environ.get("TICKDB_SEED", time.time_ns() % (1 << 32)))
    print(f"{request.node.name}: seed {seed} (reproduce with TICKDB_SEED={seed})")
    return random.Random(seed)
