"""Soak (short): no memory growth and bounded tables over 20,000 resolutions.

The workload is the one of ``python -m benchmarks.soak`` (1,000,000 resolutions there):
core calls with APP, SESSION and CALL resources in sessions that open and close, plus
``tools/call`` through the SDK's in-memory client with SESSION scopes keyed over 500 keys
while the adapter's session table holds at most 32. Traced memory is compared between
the end of a warm-up and the end of the run.
"""

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from reliability_figures import load_size, record
from resolvent import Container

ROOT = Path(__file__).resolve().parents[1]  # where `benchmarks` is imported from

RESOLUTIONS = load_size(20_000, 200_000)
GROWTH_SLACK = 64 * 1024  # bytes: interpreter and SDK caches settle during the run


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # tracemalloc figures are compared, not timed; one backend is enough and keeps it short.
    return "asyncio"


# The soak runs in a fresh interpreter: tracemalloc counts every allocation of the process,
# and in the suite's own one, threads and caches that earlier tests left behind settled
# during the run (87 KB "growth" once, on a loaded machine, where alone it is 15 KB).
_SOAK = "import anyio, json, sys; from benchmarks import soak; " + (
    "print(json.dumps(anyio.run(soak.soak, int(sys.argv[1]))))"
)


@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
async def test_no_memory_growth_and_bounded_tables(anyio_backend: str) -> None:
    pytest.importorskip("mcp", reason="the soak drives an MCP server: needs the mcp extra")
    proc = await anyio.run_process(
        [sys.executable, "-c", _SOAK, str(RESOLUTIONS)], cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    figures: dict[str, Any] = json.loads(proc.stdout)
    record(f"soak {RESOLUTIONS} {anyio_backend}", figures)
    assert figures["resources_leaked"] == {"app": 0, "session": 0, "call": 0}
    assert figures["open_call_resources_between_calls"] == 0
    assert figures["session_table_max"] <= figures["session_table_bound"]
    assert figures["plan_cache_max"] <= 2  # one tool, one handler
    assert figures["growth_bytes"] < GROWTH_SLACK
    assert figures["max_growth_bytes"] < GROWTH_SLACK


def test_the_plan_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import resolvent._container.plans as container_module

    monkeypatch.setattr(container_module, "_MAX_PLANS", 8)
    container = Container()
    functions = []
    for n in range(50):
        exec(f"async def handler_{n}(x: int) -> int:\n    return x", namespace := {})
        functions.append(namespace[f"handler_{n}"])
        container.compile(functions[-1])
        assert len(container._plans) <= 8
    # The most recent plans are the ones kept, and an evicted one compiles again.
    assert container.compile(functions[-1]) is container.compile(functions[-1])
    assert container.compile(functions[0]).fn is functions[0]
    assert len(container._plans) <= 8
