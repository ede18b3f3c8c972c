"""Scenario graphs, described once and turned into source code by each implementation.

A graph is a tuple of nodes in dependency order; the last node is the root, whose value
the handler receives. Every node body is the same for every implementation: count the
execution, optionally sleep, and return ``index + sum(dependencies) [+ len(user_id)]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

USER_ID = "user-1"


@dataclass(frozen=True)
class Node:
    deps: tuple[int, ...] = ()
    arg: bool = False  # takes the call argument ``user_id`` by name
    kind: str = "async"  # "async" | "sync" | "agen"
    app: bool = False  # an APP singleton (created once, shared by every call)
    sleep: float = 0.0


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    threaded: bool = False  # sync nodes run in a worker thread (else inline on the loop)
    concurrent: bool = False  # independent async branches may run at the same time

    @property
    def root(self) -> int:
        return len(self.nodes) - 1

    @property
    def kinds(self) -> set[str]:
        return {n.kind for n in self.nodes}

    @property
    def has_app(self) -> bool:
        return any(n.app for n in self.nodes)


def expected(graph: Graph) -> int:
    """The handler's result: the root's value, computed directly."""
    vals: list[int] = []
    for i, node in enumerate(graph.nodes):
        vals.append(i + sum(vals[j] for j in node.deps) + (len(USER_ID) if node.arg else 0))
    return vals[-1]


def levels(graph: Graph) -> list[list[int]]:
    """Nodes grouped by depth: each level depends only on earlier levels."""
    depth: list[int] = []
    for node in graph.nodes:
        depth.append(1 + max((depth[j] for j in node.deps), default=-1))
    out: list[list[int]] = [[] for _ in range(max(depth) + 1)]
    for i, d in enumerate(depth):
        out[d].append(i)
    return out


def node_source(
    i: int,
    node: Node,
    dep_param: Callable[[int], str],
    arg_param: str,
    ret: str,
    arg_first: bool = False,
) -> str:
    """The source of node *i*: ``dep_param(j)`` renders the parameter for dependency j."""
    params = [dep_param(j) for j in node.deps]
    if node.arg:
        params.insert(0 if arg_first else len(params), arg_param)
    head = "def" if node.kind == "sync" else "async def"
    expr = " + ".join(
        [str(i), *(f"d{j}" for j in node.deps), *(["len(user_id)"] if node.arg else [])]
    )
    lines = [f"{head} n{i}({', '.join(params)}){ret}:", f"    counts[{i}] += 1"]
    if node.sleep:
        lines.append(f"    await sleep({node.sleep!r})")
    if node.kind == "agen":
        lines += [f"    yield {expr}", f"    teardowns[{i}] += 1"]
    else:
        lines.append(f"    return {expr}")
    return "\n".join(lines) + "\n"


# --- the scenarios' graphs -------------------------------------------------------------


def single() -> Graph:
    return Graph((Node(),))


def diamond(kind: str = "async", threaded: bool = False) -> Graph:
    leaves = [Node(kind=kind) for _ in range(4)]
    mids = [Node((0, 1), kind=kind), Node((1, 2), kind=kind), Node((2, 3), kind=kind)]
    root = Node((4, 5, 6), arg=True, kind=kind)
    return Graph((*leaves, *mids, root), threaded=threaded)


def chain(n: int) -> Graph:
    return Graph(tuple(Node((i - 1,) if i else ()) for i in range(n)))


def singleton() -> Graph:
    return Graph(
        (
            Node(app=True),
            Node((0,), arg=True),
            Node((0,)),
            Node((0, 1, 2), arg=True),
        )
    )


def fan(n: int = 50) -> Graph:
    return Graph((*(Node() for _ in range(n)), Node(tuple(range(n)))))


def resource() -> Graph:
    return Graph((Node(kind="agen"), Node((0,), arg=True)))


def sleepers(concurrent: bool, n: int = 10, seconds: float = 0.01) -> Graph:
    return Graph(
        (*(Node(sleep=seconds) for _ in range(n)), Node(tuple(range(n)))),
        concurrent=concurrent,
    )
