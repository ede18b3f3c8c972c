"""The graph compiler: walk a function's resolvers into the steps of a plan.

Owns the walk (iterative: a 10,000-resolver chain compiles at the default recursion limit)
the reuse of the sub-graphs earlier plans walked is `subgraphs`, the building of steps `steps`,
the checks and their messages `checks`, the order `toposort`. Never runs anything and
never imports what runs plans.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Hashable, Sequence
from typing import Any, get_args, get_origin

from .._reading.annotations import NO_DEFAULT, type_name
from .._reading.kinds import Kind, is_inline
from .._reading.params import Param
from .._reading.signature import FunctionInfo
from .._vocabulary.frozen import Frozen, put
from .._vocabulary.markers import Resolve
from .._vocabulary.scopes import Scope
from .checks import (
    ambiguous,
    captive_source,
    check_asks,
    check_lifetime,
    check_type,
    cycle,
    name_of,
    no_provider,
    unclassifiable,
)
from .plan import Input
from .registry import Expansion, Piece, Provider, Registry, read, resolver_key
from .steps import (
    Graph,
    arg_input,
    build_steps,
    edge_input,
    join_pieces,
    joined,
    shared_arguments,
)
from .subgraphs import WalkNode, close, piece_of, splice

__all__ = ("NO_OVERRIDES", "Overrides", "build_graph")


class Overrides(Frozen, compare=True):
    """The overrides active in one context: immutable, one layer per open block.

    ``by_key`` and ``by_type`` map a target to ``(block id, replacement)``; ``stamp`` (the
    open blocks' ids, in order) identifies the set for plan caching.
    """

    __slots__ = ("by_key", "by_type", "layers", "plain", "stamp")
    by_key: dict[Hashable, tuple[int, Callable[..., Any]]]
    by_type: dict[Any, tuple[int, Callable[..., Any]]]
    stamp: tuple[int, ...]
    layers: tuple[Any, ...]  # the open blocks, in order of entry
    plain: dict[int, str]
    """The blocks entered with a plain ``with`` (they cannot await a close): id -> how
    the block was written, for messages."""

    def __init__(
        self,
        by_key: dict[Hashable, tuple[int, Callable[..., Any]]] | None = None,
        by_type: dict[Any, tuple[int, Callable[..., Any]]] | None = None,
        stamp: tuple[int, ...] = (),
        layers: tuple[Any, ...] = (),
        plain: dict[int, str] | None = None,
    ) -> None:
        put(self, "by_key", {} if by_key is None else by_key)
        put(self, "by_type", {} if by_type is None else by_type)
        put(self, "stamp", stamp)
        put(self, "layers", layers)
        put(self, "plain", {} if plain is None else plain)


NO_OVERRIDES = Overrides()


class _Compiler:
    """One compilation: the walk from the root's markers, each resolver read once (a node),
    then the steps in topological order."""

    def __init__(
        self,
        root: FunctionInfo,
        registry: Registry,
        overrides: Overrides,
        value_types: tuple[type, ...],
    ) -> None:
        self.registry = registry
        self.overrides = overrides
        self.value_types = value_types
        self.root = root
        self.nodes: dict[Hashable, WalkNode] = {}
        # With overrides only (a node's own while no plan shares it, so not on it):
        # key -> the id of the override block that put its node here, and key -> the
        # key of the provider its node stands in for.
        self.replaced: dict[Hashable, int] = {}
        self.replaces: dict[Hashable, Hashable] = {}
        self.root_args: dict[str, Param] = {}
        self.used_values: list[Any] = []
        # A resolver's checked expansion, shared by the plans that use it; none while
        # overrides are active (a replacement changes what a key expands to).
        self.memo = registry.shared_expansions() if overrides is NO_OVERRIDES else None

    @property
    def piece_epoch(self) -> int:
        return self.registry.piece_epoch

    # -- classification ----------------------------------------------------------------

    def value_type(self, tp: Any) -> Any:
        """The declared framework-value type *tp* stands for, or None."""
        return _value_type(tp, self.value_types, self.used_values) if self.value_types else None

    def target(self, param: Param, marker: Resolve, consumer: Hashable | None) -> Hashable:
        """The node for *marker* on *param* of *consumer*, created if new."""
        replaced: int | None = None
        if marker.fn is None:
            fn, replaced = self._by_type(param, consumer)
        else:
            fn = marker.fn
        key = resolver_key(fn)
        found = self.overrides.by_key.get(key)
        if found is not None and consumer is not None and self.replaces.get(consumer) == key:
            found = None  # inside its replacement (a spy), Resolve(original) is the original
        existing = key if found is None else resolver_key(found[1])
        if existing in self.nodes:  # already read: each function is read once per compile
            return existing
        original = self.registry.implicit(fn, key)
        replaces: Hashable = None
        if found is not None:
            replaced, replacement = found
            provider = self.registry.get(replacement) or Provider(
                read(replacement),
                original.scope,
                original.inline or is_inline(replacement),
            )
            replaces, key = key, existing
        else:
            provider = original
        provider.needs_return()
        self.nodes[key] = WalkNode(provider, key, consumer, param.name)
        if replaced is not None:
            self.replaced[key] = replaced
        if replaces is not None:
            self.replaces[key] = replaces
        return key

    def _by_type(
        self, param: Param, consumer: Hashable | None
    ) -> tuple[Callable[..., Any], int | None]:
        tp = param.bare
        found = self.overrides.by_type.get(tp)
        if found is not None:
            return found[1], found[0]
        offered = self.registry.for_type(tp)
        if len(offered) == 1:
            return offered[0].fn, None
        where = f"parameter {param.name!r} of {name_of(self, consumer)}"
        if not offered:
            raise no_provider(self, self.registry, where, tp, consumer, param.name)
        raise ambiguous(self, offered, where, tp, consumer, param.name)

    def expand(self, key: Hashable) -> Sequence[tuple[Param, Hashable]]:
        """Classify every parameter of one resolver; return its resolver edges."""
        node = self.nodes[key]
        if node.edges is not None:
            return node.edges
        memo = self.memo if key not in self.replaced and key not in self.replaces else None
        if memo is not None:
            found = memo.get(key)
            if found is not None and found.provider is node.provider:
                return self._replay(node, found)
        info, scope = node.provider, node.provider.scope
        edges: list[tuple[Param, Hashable]] = []
        inputs: list[Input | tuple[Param, Hashable]] = []
        for param in info.params:
            if param.marker is not None:
                child = self.target(param, param.marker, key)
                check_type(self, key, param, self.nodes[child])
                check_lifetime(self, node, param, self.nodes[child])
                edge = (param, child)  # one tuple, in both
                edges.append(edge)
                inputs.append(edge)
                continue
            declared = self.value_type(param.bare)
            if declared is not None:
                if scope > Scope.CALL:
                    captive_source(self, node, param, f"the framework value {type_name(declared)}")
                inputs.append(Input(param.name, "value", value_type=declared))
                continue
            memo = None  # classified by the handler's own arguments: not shared
            root_param = self.root_args.get(param.name)
            if root_param is not None:
                if scope > Scope.CALL:
                    captive_source(self, node, param, f"the call argument {param.name!r}")
                default = (
                    root_param.default if root_param.default is not NO_DEFAULT else param.default
                )
                inputs.append(arg_input(param.name, default))
                continue
            if param.default is not NO_DEFAULT:
                continue
            unclassifiable(self, node, param, self.root_args, self.value_types)
        node.edges = edges
        node.inputs = inputs
        if memo is not None and not any(c in self.replaced for _, c in edges):
            if len(memo) >= 4096:
                self.registry.forget_expansions()
            elif key in memo:  # another reading of it: the pieces made may hold its step
                self.registry.piece_epoch += 1
            kept = tuple(edges)
            # This plan holds the inputs the memo holds: its step is the one later plans
            # share (`build_steps` knows a shared step by its inputs). Inputs that are all
            # resolver edges are the edges, the same tuple.
            node.inputs = shared = kept if len(inputs) == len(edges) else tuple(inputs)
            memo[key] = Expansion(key, node.provider, kept, shared)
        return edges

    def _replay(self, node: WalkNode, found: Expansion) -> Sequence[tuple[Param, Hashable]]:
        """*node*'s expansion as an earlier plan checked it: the same edges and inputs
        (shared, never changed), children created where this plan has not met them yet,
        with the reading their own shared expansion holds (a child that has none, one
        reading a call argument, is read as the walk reads it)."""
        edges, inputs = found.edges, found.inputs
        nodes = self.nodes
        memo = self.memo
        assert memo is not None
        key = node.key
        for param, child in edges:
            if child not in nodes:
                entry = memo.get(child)
                if entry is None:
                    marker = param.marker
                    assert marker is not None  # an edge's parameter has its marker
                    self.target(param, marker, key)
                else:
                    nodes[child] = WalkNode(entry.provider, child, key, param.name)
        if inputs is not edges:  # it takes more than resolvers' values: maybe framework ones
            for declared in found.values:
                if declared not in self.used_values:
                    self.used_values.append(declared)
        node.inputs = inputs
        node.edges = edges
        return edges

    # -- the walk --------------------------------------------------------------------

    def run(self) -> Graph:
        root_inputs: list[Input | tuple[Param, Hashable]] = []
        arguments: list[str] = []
        for param in self.root.params:
            if param.marker is None and self.value_type(param.bare) is None:
                self.root_args[param.name] = param
                arguments.append(param.name)
        post: list[Hashable] = []
        state: dict[Hashable, int] = {}
        nodes = self.nodes
        # The starts kept whole as steps (`piece_of`), while all are: their pieces joined.
        memo = self.memo
        pieces: list[Piece] | None = [] if memo is not None else None
        starts: list[Hashable] = []
        epoch = self.registry.piece_epoch
        for param in self.root.params:
            marker = param.marker
            if marker is None:
                declared = self.value_type(param.bare)
                if declared is not None:
                    root_inputs.append(Input(param.name, "value", value_type=declared))
                continue
            # A resolver an earlier plan expanded (and no override): its node has the
            # reading that expansion holds, as `_replay` makes a child's.
            found = node = None
            fn = marker.fn
            start: Hashable = None
            if fn is not None and memo is not None:
                start = resolver_key(fn)
                node = nodes.get(start)
                if node is None:
                    found = memo.get(start)
                    if found is not None:
                        node = nodes[start] = WalkNode(found.provider, start, None, param.name)
            if node is None:
                start = self.target(param, marker, None)
                node = nodes[start]
            check_type(self, None, param, node)
            root_inputs.append((param, start))
            if pieces is not None:
                piece = None if found is None else found.piece
                if piece is None or piece.epoch != epoch:  # (never `UNSPLICEABLE`'s)
                    piece = piece_of(self, start)
                if piece is not None:
                    pieces.append(piece)
                    starts.append(start)
                    _keep_edge(self, param, start, piece)  # checked against it: kept
                    continue
                for earlier in starts:  # walked as they would have been, in order
                    self.visit(earlier, state, post)
                pieces = None
            self.visit(start, state, post)
        shared = shared_arguments(tuple(arguments))
        if pieces is not None:
            joined = join_pieces(self, pieces, root_inputs, shared) if pieces else None
            if joined is not None:
                return joined
            for start in starts:
                self.visit(start, state, post)
        # With no worker-thread step the sort keeps the walk's post-order as it is, so
        # the steps are built in that order, and again sorted if a step runs in a thread
        # (with overrides, sorted first: their checks raise in the plan's order).
        order = post if self.overrides is NO_OVERRIDES else self.sort(post)
        plain = None if self.overrides is NO_OVERRIDES else self.overrides.plain
        graph = build_steps(self, order, root_inputs, shared, plain)
        if graph.call_threads and order is post:
            graph = build_steps(self, self.sort(post), root_inputs, graph.arguments, plain)
        return graph

    def visit(self, start: Hashable, state: dict[Hashable, int], post: list[Hashable]) -> None:
        """Add *start*'s sub-graph to the plan: spliced if an earlier plan kept it whole,
        else walked (depth first, post-order into *post*), each node checked."""
        if state.get(start) == 2 or splice(self, start, state, post):
            return
        nodes = self.nodes
        state[start] = 1
        # Each node is expanded once, when the walk first enters it; the stack keeps
        # its edges beside it (`cycle` reads the keys and next indexes).
        stack: list[tuple[Hashable, int]] = [(start, 0)]
        edges_of = [self.expand(start)]
        while stack:
            key, index = stack[-1]
            edges = edges_of[-1]
            if index < len(edges):
                stack[-1] = (key, index + 1)
                child = edges[index][1]
                seen = state.get(child)
                if seen is None:
                    if splice(self, child, state, post):
                        continue
                    state[child] = 1
                    stack.append((child, 0))
                    edges_of.append(self.expand(child))
                elif seen == 1:
                    raise cycle(self, stack, child)
            else:
                state[key] = 2
                check_asks(nodes[key])
                post.append(key)
                close(self, key)
                stack.pop()
                edges_of.pop()

    def sort(self, post: list[Hashable]) -> list[Hashable]:
        """The plan's order: the walk's post-order (every key's children come before it,
        and ties go to the earlier key), sorted if a step runs in a worker thread."""
        nodes = self.nodes
        if not any(_threaded(nodes[key]) for key in post):
            return post
        from .toposort import toposort  # needed only when a step runs in a thread

        return toposort(
            post,
            lambda key: {c for _, c in nodes[key].edges or ()},
            lambda key: _threaded(nodes[key]),
        )


def _value_type(tp: Any, value_types: tuple[type, ...], used: list[Any]) -> Any:
    """The declared framework-value type (of *value_types*) *tp* stands for, added to
    *used* if new; or None."""
    members = get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for member in members:
        if member is type(None):
            continue
        cls = get_origin(member) or member
        if isinstance(cls, type):
            for declared in value_types:
                if issubclass(cls, declared):
                    if declared not in used:
                        used.append(declared)
                    return declared
    return None


def _known(
    root: FunctionInfo,
    registry: Registry,
    values: tuple[type, ...],
) -> Graph | None:
    """*root*'s plan when every resolver parameter of it is one an earlier plan checked
    and took whole (`Registry.root_edges`, still valid): its pieces joined, nothing
    looked up or checked again. None for anything else (the walk decides)."""
    registry.slot_table()  # (may empty the expansions: then nothing is known)
    known, epoch = registry.root_edges, registry.piece_epoch
    pieces: list[Piece] = []
    inputs: list[Input] = []
    arguments: list[str] = []
    used: list[Any] = []
    for param in root.params:
        if param.marker is None:
            declared = _value_type(param.bare, values, used) if values else None
            if declared is None:
                arguments.append(param.name)
            else:
                inputs.append(Input(param.name, "value", value_type=declared))
            continue
        entry = known.get(id(param))
        if entry is None:
            return None
        kept, found, made = entry
        piece = found.piece  # (of this epoch: *found* is the expansion the registry holds)
        if kept is not param or piece is None or piece.epoch != epoch:
            return None
        pieces.append(piece)
        inputs.append(made)
    if not pieces:
        return None
    return joined(root, pieces, tuple(inputs), shared_arguments(tuple(arguments)), used)


def _keep_edge(walk: _Compiler, param: Param, start: Hashable, piece: Piece) -> None:
    """Keep the handler's *param*, checked against *start*'s resolver whose whole
    sub-graph is *piece*, for later plans (`_known`); not one found by type."""
    if param.marker is None or param.marker.fn is None:
        return
    known = walk.registry.root_edges
    if len(known) >= 4096:
        known.clear()
    memo = walk.memo
    assert memo is not None
    slot = piece.steps[-1].index  # the resolver's own step comes last
    known[id(param)] = (param, memo[start], edge_input(param, slot))


def build_graph(
    fn: Callable[..., Any],
    registry: Registry,
    overrides: Overrides | None,
    value_types: tuple[type, ...],
) -> Graph:
    """Compile *fn*'s resolver graph into topologically sorted steps, with the *overrides*
    active (None: none).

    Raises:
        InvalidSignature: on any mistake in the graph, before anything runs.
    """
    root = read(fn)
    no_override = overrides is None or overrides is NO_OVERRIDES
    if no_override and registry.shared_expansions():  # earlier plans' expansions
        graph = _known(root, registry, value_types)
        if graph is not None:
            return graph
    return _Compiler(root, registry, overrides or NO_OVERRIDES, value_types).run()


def _threaded(node: WalkNode) -> bool:
    """Whether *node*'s step runs in a worker thread (a plain sync CALL function)."""
    provider = node.provider
    return provider.scope is Scope.CALL and _threaded_kind(provider.kind, provider.inline)


def _threaded_kind(kind: Kind, inline: bool) -> bool:
    return kind is Kind.SYNC and not inline
