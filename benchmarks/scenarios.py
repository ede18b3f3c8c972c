"""The scenario list (S1-S8 and the MCP tool call)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from . import graphs, impls
from .graphs import Graph
from .runner import Factory, Scenario

CHAIN_LENGTHS = (1, 10, 100, 1_000, 10_000)


def _factories(graph: Graph, names: tuple[str, ...] | None = None) -> dict[str, Factory]:
    chosen = (
        impls.IMPLEMENTATIONS if names is None else {n: impls.IMPLEMENTATIONS[n] for n in names}
    )
    return {name: functools.partial(build, graph) for name, build in chosen.items()}


def _scenario(key: str, title: str, graph: Graph, **kw: Any) -> Scenario:
    return Scenario(key, title, graph, _factories(graph), nodes=len(graph.nodes), **kw)


def all_scenarios(chains: tuple[int, ...] = CHAIN_LENGTHS) -> list[Scenario]:
    out = [
        _scenario("S1", "one async resolver", graphs.single()),
        _scenario("S2", "8-resolver diamond (root takes a call argument)", graphs.diamond()),
    ]
    for n in chains:
        out.append(_scenario(f"S3 chain {n:,}", f"chain of {n:,} resolvers", graphs.chain(n)))
    out += [
        _scenario("S4", "APP singleton + 3 CALL resolvers + call argument", graphs.singleton()),
        _scenario("S5 inline", "diamond of plain def resolvers, inline", graphs.diamond("sync")),
        _scenario(
            "S5 thread",
            "diamond of plain def resolvers, worker thread",
            graphs.diamond("sync", threaded=True),
        ),
        _scenario("S6", "root with 50 independent leaves", graphs.fan()),
        _scenario("S7", "async-generator resource per call, with teardown", graphs.resource()),
        _scenario(
            "S8 sequential", "10 resolvers each awaiting a 10 ms sleep", graphs.sleepers(False)
        ),
    ]
    concurrent = graphs.sleepers(True)
    out.append(
        Scenario(
            "S8 concurrent",
            "10 resolvers each awaiting a 10 ms sleep, concurrent",
            concurrent,
            _factories(concurrent),
            references={"one sleep": _one_sleep},
            nodes=len(concurrent.nodes),
        )
    )
    return out


async def _one_sleep(stack: contextlib.AsyncExitStack) -> impls.Instance:
    return await impls.one_sleep(0.01)


def mcp_scenario() -> Scenario | str:
    """The MCP tool call, or why it cannot run."""
    from . import mcp_tools

    return mcp_tools.scenario()
