"""Sub-graphs kept whole for later plans: once the walk has checked a resolver and all it
needs, `close` keeps that sub-graph on the resolver's shared expansion, and `splice` adds
it to a later plan without walking it again (each resolver already read and checked).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._reading.kinds import Kind
from .._vocabulary.scopes import Scope
from .registry import UNSPLICEABLE, Closure, Expansion, Piece, Provider
from .steps import scope_set

if TYPE_CHECKING:
    from .._reading.params import Param
    from .plan import Input

    class Walking(Protocol):
        """What keeping and splicing sub-graphs read and add to of one compilation."""

        @property
        def nodes(self) -> dict[Hashable, WalkNode]: ...
        @property
        def memo(self) -> dict[Hashable, Expansion] | None:
            """The shared expansions, None with overrides (nothing is kept or spliced)."""
            ...

        @property
        def used_values(self) -> list[Any]: ...
        @property
        def piece_epoch(self) -> int:
            """The registry's `Registry.piece_epoch`: pieces of another are stale."""
            ...


__all__ = ("WalkNode", "close", "piece_of", "splice")


class WalkNode:
    """One resolver as one compilation's walk met it: its provider, the consumer and
    parameter it was first met through, and, once expanded, its edges and inputs."""

    __slots__ = ("edges", "inputs", "key", "param", "parent", "provider")

    def __init__(
        self,
        provider: Provider,
        key: Hashable,
        parent: Hashable | None,
        param: str,
        edges: Sequence[tuple[Param, Hashable]] | None = None,
        inputs: Sequence[Input | tuple[Param, Hashable]] = (),
    ) -> None:
        self.provider = provider
        self.key = key
        self.parent = parent
        self.param = param
        self.edges = edges
        self.inputs = inputs

    @property
    def name(self) -> str:
        return self.provider.name


_MAX_CLOSURE = 128
"""The largest sub-graph kept whole: a closure costs memory in its size, and a deep
chain (10,000 resolvers) would otherwise keep one per link. Larger sub-graphs are
walked, their parts spliced."""

_NO_SUB_GRAPH = Closure((), (), ())
"""The kept sub-graph of every resolver that calls no resolver and takes no framework
value: one, shared (splicing it adds the resolver alone)."""


def close(walk: Walking, key: Hashable) -> None:
    """Keep *key*'s whole sub-graph, now walked and checked, for later plans: from
    its own expansion and its children's sub-graphs, as a walk from *key* alone
    would meet them. Only for a shared expansion whose children are all kept."""
    memo = walk.memo
    if memo is None:
        return
    found: Expansion | None = memo.get(key)
    nodes = walk.nodes
    if found is None or found.closure is not None or found.provider is not nodes[key].provider:
        return
    below: list[Expansion] = []
    for child in dict.fromkeys(c for _, c in found.edges):
        entry: Expansion | None = memo.get(child)
        if entry is None or entry.closure is None:
            return
        below.append(entry)
    # The walk creates a node's children when it enters the node, then walks each
    # child's sub-graph in turn, skipping what it has met: first come first kept.
    creations: dict[Hashable, WalkNode | tuple[Hashable, str, Provider]] = {}
    for param, child in found.edges:
        if child not in creations:
            creations[child] = (key, param.name, memo[child].provider)
    post: dict[Hashable, Expansion] = {}
    values: dict[Any, None] = dict.fromkeys(found.values)
    for entry in below:
        closure = entry.closure
        assert closure is not None
        for shared in closure.creations:
            if shared.key not in creations:
                creations[shared.key] = shared
        for item in closure.post:
            if item.key not in post:
                post[item.key] = item
        if entry.key not in post:
            post[entry.key] = entry
        if len(post) >= _MAX_CLOSURE:
            return
        values.update(dict.fromkeys(closure.values))
    if not creations and not values:  # a resolver with no resolver to call
        found.closure = _NO_SUB_GRAPH
        return
    made_here: list[WalkNode] = []
    for child, made in creations.items():
        if isinstance(made, WalkNode):
            made_here.append(made)
            continue
        parent, param_name, provider = made  # a child of *key*: its node, complete
        entry = post[child]
        made_here.append(WalkNode(provider, child, parent, param_name, entry.edges, entry.inputs))
    found.closure = Closure(tuple(made_here), tuple(post.values()), tuple(values))


def splice(walk: Walking, key: Hashable, state: dict[Hashable, int], post: list[Hashable]) -> bool:
    """Add *key*'s kept sub-graph (see `close`) to this plan without walking it: the
    nodes, parents, post-order and value types the walk would give, each resolver
    already read and checked. False (walk it) when none is kept or when a node this
    plan already holds has another reading."""
    memo = walk.memo
    if memo is None:
        return False
    found: Expansion | None = memo.get(key)
    nodes = walk.nodes
    if found is None or found.closure is None or found.provider is not nodes[key].provider:
        return False
    closure = found.closure
    for item in closure.post:  # the resolver's own node is checked (above) and new
        met = state.get(item.key)
        if met == 1:
            return False  # a cycle: the walk says where
        if met is None:
            node = nodes.get(item.key)
            if node is not None and node.provider is not item.provider:
                return False
    for made in closure.creations:
        if made.key not in nodes:
            nodes[made.key] = made  # shared, complete: never expanded here
    used = walk.used_values
    for declared in closure.values:
        if declared not in used:
            used.append(declared)
    for item in closure.post:
        sub = item.key
        if sub not in state:
            state[sub] = 2
            node = nodes[sub]
            if node.edges is None:  # a node of this plan's own
                node.edges = item.edges
                node.inputs = item.inputs
            post.append(sub)
    if key not in state:  # the resolver itself, last
        state[key] = 2
        node = nodes[key]
        if node.edges is None:
            node.edges = found.edges
            node.inputs = found.inputs
        post.append(key)
    return True


def piece_of(walk: Walking, key: Hashable) -> Piece | None:
    """*key*'s whole sub-graph as the steps a plan takes (see `Piece`), made the first
    time every step in it has been built; None (splice or walk it) while one is not,
    when it may not be taken whole, or when *key*'s node has another reading."""
    memo = walk.memo
    if memo is None:
        return None
    found: Expansion | None = memo.get(key)
    if found is None or found.provider is not walk.nodes[key].provider:
        return None
    piece = found.piece
    epoch = walk.piece_epoch
    if piece is not None and (piece.epoch == epoch or piece is UNSPLICEABLE):
        return None if piece is UNSPLICEABLE else piece
    closure = found.closure
    if closure is None or found.step is None:
        return None
    steps = [item.step for item in closure.post]
    steps.append(found.step)
    scopes: set[Scope] = set()
    call_resources = False
    for step in steps:
        if step is None:
            return None  # a plan has not built it yet
        scope = step.scope
        scopes.add(scope)
        if step.may_ask or (scope is _CALL and step.kind is _SYNC and not step.inline):
            found.piece = UNSPLICEABLE  # its own copy per plan, or a sort: walk it
            return None
        if scope is _CALL and step.kind.is_resource:
            call_resources = True
    piece = Piece(tuple(steps), scope_set(scopes), call_resources, closure.values, epoch)
    found.piece = piece
    return piece


_CALL = Scope.CALL
_SYNC = Kind.SYNC
