"""resolvent's other paths in the benchmark harness, and the instruction-count guard's rules.

Every path (``call.resolve`` in a session's call, the interpreter, concurrent mode, an MCP
tool that may ask over both protocols) must compute what the direct computation does and
run each resolver once per call, as every implementation the harness times. The guard's
comparison with its baseline is checked on figures given to it; counting them needs
valgrind and minutes, so it runs as a CI job (``.ci/jobs.py instructions``), not here.
Nothing here measures or asserts a time.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import graphs, instructions, paths  # noqa: E402
from benchmarks.runner import Scenario, verify  # noqa: E402

GRAPHS = {
    "S1": graphs.single(),
    "S2": graphs.diamond(),
    "S3 chain 10": graphs.chain(10),
    "S4": graphs.singleton(),
    "S5 inline": graphs.diamond("sync"),
    "S6": graphs.fan(),
    "S7": graphs.resource(),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the harness runs on asyncio


@pytest.mark.parametrize("path", list(paths.PATHS))
@pytest.mark.parametrize("key", list(GRAPHS))
async def test_path_verifies(key: str, path: str) -> None:
    graph = GRAPHS[key]
    async with contextlib.AsyncExitStack() as stack:
        inst = await paths.PATHS[path](graph, stack)
        assert not isinstance(inst, str), inst
        assert await verify(inst, Scenario(key, key, graph, {}, verify_calls=4)) == 4


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("key", ["S4", "S7"])
async def test_mcp_tool_that_may_ask_verifies(key: str, protocol: str) -> None:
    pytest.importorskip("mcp")
    from benchmarks import mcp_ask

    graph = GRAPHS[key]
    async with contextlib.AsyncExitStack() as stack:
        for variant in ("hand-written", "resolvent"):
            inst = await mcp_ask.build(graph, protocol, variant, stack)
            assert not isinstance(inst, str), inst
            assert await verify(inst, Scenario(key, key, graph, {}, verify_calls=3)) == 3


def _baseline(**figures: dict[str, float]) -> dict[str, Any]:
    return {"figures": figures}


def test_guard_fails_a_rise_over_three_percent_and_a_missing_figure() -> None:
    baseline = _baseline(
        S1={"hand-written": 4_000, "run": 10_000, "call.resolve": 20_000}, S2={"run": 5_000}
    )
    steady = {"hand-written": 4_000, "run": 10_290, "call.resolve": 19_000}
    assert instructions.check({"S1": steady, "S2": {"run": 5_000}}, baseline) == ([], [])
    rose = {"hand-written": 4_000, "run": 10_310, "call.resolve": 20_000}
    problems, notes = instructions.check({"S1": rose}, baseline)
    assert problems == [
        "S1 / run: 10,310 instructions per call, +3.1% over the baseline's 10,000 (tolerance 3%)",
        "S2 / run: not counted (baseline 5,000)",
    ]
    assert notes == []


def test_guard_notes_a_rise_its_hand_written_floor_shares() -> None:
    # Where objects sit in memory moves with unrelated changes, and a large call's figure
    # with it, the hand-written floor's as much as resolvent's: that is not a regression.
    baseline = _baseline(FastAPI={"hand-written": 1_000_000, "resolvent": 1_010_000})
    moved = {"FastAPI": {"hand-written": 1_040_000, "resolvent": 1_050_000}}
    problems, notes = instructions.check(moved, baseline)
    assert problems == []
    assert [n.split(":")[0] for n in notes] == ["FastAPI / hand-written", "FastAPI / resolvent"]
    # resolvent's own part rising is one, whatever the floor does.
    worse = {"FastAPI": {"hand-written": 1_040_000, "resolvent": 1_100_000}}
    assert len(instructions.check(worse, baseline)[0]) == 1


def test_the_committed_baseline_holds_every_figure_the_guard_counts() -> None:
    # A new path or scenario is guarded from the commit that adds it: its figure and its
    # number of counted calls are in the baseline.
    data = json.loads(instructions.BASELINE.read_text(encoding="utf-8"))
    for scenario, path in instructions.items(None, None):
        assert data["figures"][scenario][path] > 0, (scenario, path)
        assert instructions.calls_for(scenario, path, data) == data["calls"][scenario][path]
    assert data["why"] and data["python"] and data["versions"]["anyio"]


def test_counted_calls_follow_the_budget() -> None:
    # Without a recorded count: the budget over the last figure, rounded, within bounds.
    figures = _baseline(S1={"run": 4_000, "interpreter": 390_000, "concurrent": 9e6})
    assert instructions.calls_for("S1", "run", figures) == instructions.MAX_CALLS
    assert instructions.calls_for("S1", "interpreter", figures) == 100
    assert instructions.calls_for("S1", "concurrent", figures) == instructions.MIN_CALLS
    assert instructions.calls_for("S1", "run", {**figures, "calls": {"S1": {"run": 7}}}) == 7


def test_table_shows_each_path_beside_its_floor() -> None:
    text = instructions.table(
        {
            "S2": {
                "hand-written": 1_000,
                "run": 1_130,
                "hand-written concurrent": 2_000,
                "concurrent": 3_000,
            }
        }
    )
    assert "| S2 | 1,000 | 1,130 (1.13x) | 2,000 | 3,000 (1.50x) |" in text
