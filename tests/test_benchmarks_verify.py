"""The benchmark harness's verification step, without any timing.

Every implementation in ``benchmarks/`` must compute the same result as the direct
computation, run each resolver exactly once per call (APP singletons once in all),
and tear each resource down once per call. Nothing here measures or asserts a time.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("dishka")
pytest.importorskip("wireup")
pytest.importorskip("fast_depends")
pytest.importorskip("diwire")
pytest.importorskip("that_depends")
pytest.importorskip("svcs")
pytest.importorskip("modern_di")
pytest.importorskip("fastmcp")
pytest.importorskip("mcp")

from benchmarks import graphs, impls  # noqa: E402
from benchmarks.runner import Scenario, verify  # noqa: E402

GRAPHS = {
    "S1": graphs.single(),
    "S2": graphs.diamond(),
    "S3 chain 10": graphs.chain(10),
    "S4": graphs.singleton(),
    "S5 inline": graphs.diamond("sync"),
    "S5 thread": graphs.diamond("sync", threaded=True),
    "S6": graphs.fan(),
    "S7": graphs.resource(),
    "S8 sequential": graphs.sleepers(False, seconds=0.001),
    "S8 concurrent": graphs.sleepers(True, seconds=0.001),
}

# What each library cannot express (reported as n/a by the harness).
NOT_APPLICABLE = {
    ("mcp-sdk", "S4"),
    ("mcp-sdk", "S5 inline"),
    ("mcp-sdk", "S7"),
    ("mcp-sdk", "S8 concurrent"),
    ("fast-depends", "S4"),
    ("fast-depends", "S5 inline"),
    ("fast-depends", "S8 concurrent"),
    ("dishka", "S5 thread"),
    ("dishka", "S8 concurrent"),
    ("wireup", "S5 thread"),
    ("wireup", "S8 concurrent"),
    ("diwire", "S5 thread"),
    ("diwire", "S8 concurrent"),
    # Plain factories are not cached within a call: a shared dependency would run twice.
    ("that-depends", "S2"),
    ("that-depends", "S5 inline"),
    ("that-depends", "S5 thread"),
    ("that-depends", "S8 concurrent"),
    ("svcs", "S4"),
    ("svcs", "S5 thread"),
    ("svcs", "S8 concurrent"),
    # modern-di 4 takes sync creators only.
    *(("modern-di", key) for key in GRAPHS if key != "S5 inline"),
    ("fastmcp", "S4"),
    ("fastmcp", "S5 thread"),
    ("fastmcp", "S8 concurrent"),
}


@pytest.fixture
def anyio_backend() -> str:
    # The peers and the hand-written baseline (asyncio.gather) are asyncio code.
    return "asyncio"


@pytest.mark.parametrize("impl", list(impls.IMPLEMENTATIONS))
@pytest.mark.parametrize("key", list(GRAPHS))
async def test_implementation_verifies(key: str, impl: str) -> None:
    graph = GRAPHS[key]
    async with contextlib.AsyncExitStack() as stack:
        inst = await impls.IMPLEMENTATIONS[impl](graph, stack)
        if isinstance(inst, str):
            assert (impl, key) in NOT_APPLICABLE, inst
            return
        assert (impl, key) not in NOT_APPLICABLE
        scenario = Scenario(key, key, graph, {}, verify_calls=4)
        assert await verify(inst, scenario) == 4


def test_verification_catches_a_resolver_run_twice() -> None:
    from benchmarks.runner import VerificationError, check

    graph = graphs.diamond()
    inst = impls.Instance(lambda: None, [2] * len(graph.nodes), [0] * len(graph.nodes))  # type: ignore[arg-type,return-value]
    with pytest.raises(VerificationError):
        check(inst, graph, 1, [graphs.expected(graph)])


async def test_mcp_scenario_verifies() -> None:
    from benchmarks import mcp_tools

    scenario = mcp_tools.scenario()
    if isinstance(scenario, str):
        pytest.skip(scenario)
    async with contextlib.AsyncExitStack() as stack:
        for factory in scenario.factories.values():
            inst = await factory(stack)
            assert not isinstance(inst, str)
            assert await verify(inst, scenario) == scenario.verify_calls


@pytest.mark.network
async def test_http_servers_verify() -> None:
    # The end-to-end servers, each in a process of its own on 127.0.0.1: the same
    # result, each resolver once per call, the resource torn down once per call.
    from benchmarks import http_e2e

    with anyio.fail_after(120):
        verified = await http_e2e.verify_only()
    assert verified == ["hand-written", "resolvent", "fastmcp"]


async def test_fastapi_scenario_verifies() -> None:
    # Each FastAPI app, called through httpx.ASGITransport: the same JSON result, each
    # resolver once per request, the APP singleton once, the resource closed once per request.
    from benchmarks import fastapi_routes

    scenario = fastapi_routes.scenario()
    assert list(scenario.factories) == [
        "hand-written",
        "resolvent",
        "fastapi-depends",
        "dishka",
        "wireup",
    ]
    async with contextlib.AsyncExitStack() as stack:
        for factory in scenario.factories.values():
            inst = await factory(stack)
            assert not isinstance(inst, str)
            assert await verify(inst, scenario) == scenario.verify_calls


def test_app_scale_scenario_verifies() -> None:
    """Both implementations compute every handler's result (the run checks it)."""
    from benchmarks import appscale

    data = anyio.run(lambda: appscale.run(rounds=1, sizes=(10,), steady_calls=10))
    row = data["sizes"]["10"]
    assert set(row) >= {"resolvent", "dishka", "cold_ratio"}
    assert "| 10 |" in appscale.table(data)
