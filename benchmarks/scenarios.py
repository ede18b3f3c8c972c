"""The scenario list (S1-S8 and the MCP tool call)."""

from __future__ import annotations

import contextlib
import dataclasses
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


PATH_GRAPHS = {
    "S1": graphs.single,
    "S2": graphs.diamond,
    "S3 chain 100": lambda: graphs.chain(100),
    "S4": graphs.singleton,
    "S5 inline": lambda: graphs.diamond("sync"),
    "S6": graphs.fan,
    "S7": graphs.resource,
}
"""The per-call scenarios whose graphs every path of resolvent runs (see `path_scenarios`)."""


def path_scenarios() -> list[Scenario]:
    """resolvent's other paths on S1-S7, keyed ``Paths S2`` and so on: ``run`` (the main
    table's resolvent), ``call.resolve``, ``interpreter`` and ``concurrent`` beside the
    hand-written code, and ``hand-written concurrent`` (independent resolvers awaited
    together, the floor of the concurrent path); then the MCP tool that may ask, over both
    protocols (``Ask legacy S2``, ``Ask 2026-07-28 S2``; see `benchmarks.mcp_ask`)."""
    from . import mcp_ask, paths

    out = []
    for key, make in PATH_GRAPHS.items():
        graph = make()
        gathered = graph if "sync" in graph.kinds else dataclasses.replace(graph, concurrent=True)
        factories = {
            "hand-written": functools.partial(impls.handwritten, graph),
            "run": functools.partial(impls.resolvent, graph),
            **{name: functools.partial(build, graph) for name, build in paths.PATHS.items()},
        }
        out.append(
            Scenario(
                f"Paths {key}",
                f"resolvent's paths: {key}",
                graph,
                factories,
                references={
                    "hand-written concurrent": functools.partial(impls.handwritten, gathered)
                },
                nodes=len(graph.nodes),
            )
        )
    try:
        import resolvent.mcp  # noqa: F401
    except ImportError:
        return out
    return out + mcp_ask.scenarios({key: make() for key, make in PATH_GRAPHS.items()})


def mcp_scenario() -> Scenario | str:
    """The MCP tool call, or why it cannot run."""
    from . import mcp_tools

    return mcp_tools.scenario()
