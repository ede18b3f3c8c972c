"""The graph compiler: walk a function's resolvers into the steps of a plan.

Owns the walk (iterative: a 10,000-resolver chain compiles at the default recursion limit)
and the building of steps; the checks and their messages are `_graph.checks`, the order
`_graph.toposort`. Never runs anything and never imports what runs plans.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Hashable, Sequence
from typing import Any, get_args, get_origin

from .._reading.annotations import NO_DEFAULT, type_name
from .._reading.kinds import Kind
from .._reading.signature import Param
from .._vocabulary.frozen import Frozen, put
from .._vocabulary.markers import Resolve, is_inline
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
    refuse_unclosable,
    unclassifiable,
)
from .plan import AskingStep, Graph, Input, Step, keep_shared
from .registry import Closure, Expansion, Provider, Registry, read, resolver_key

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


class _Node:
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


class _Compiler:
    """One compilation: the walk from the root's markers, each resolver read once (a node),
    then the steps in topological order."""

    def __init__(
        self,
        fn: Callable[..., Any],
        registry: Registry,
        overrides: Overrides,
        value_types: tuple[type, ...],
    ) -> None:
        self.registry = registry
        self.overrides = overrides
        self.value_types = value_types
        self.root = read(fn)
        self.nodes: dict[Hashable, _Node] = {}
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

    # -- classification ----------------------------------------------------------------

    def value_type(self, tp: Any) -> Any:
        """The declared framework-value type *tp* stands for, or None."""
        if not self.value_types:
            return None
        members = get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        for member in members:
            if member is type(None):
                continue
            cls = get_origin(member) or member
            if isinstance(cls, type):
                for declared in self.value_types:
                    if issubclass(cls, declared):
                        if declared not in self.used_values:
                            self.used_values.append(declared)
                        return declared
        return None

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
        self.nodes[key] = _Node(provider, key, consumer, param.name)
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
                inputs.append(_arg_input(param.name, default))
                continue
            if param.default is not NO_DEFAULT:
                continue
            unclassifiable(self, node, param, self.root_args, self.value_types)
        node.edges = edges
        node.inputs = inputs
        if memo is not None and not any(c in self.replaced for _, c in edges):
            if len(memo) >= 4096:
                memo.clear()
            kept = tuple(edges)
            # This plan holds the inputs the memo holds: its step is the one later plans
            # share (`build` knows a shared step by its inputs). Inputs that are all
            # resolver edges are the edges, the same tuple.
            node.inputs = shared = kept if len(inputs) == len(edges) else tuple(inputs)
            memo[key] = Expansion(key, node.provider, kept, shared)
        return edges

    def _replay(self, node: _Node, found: Expansion) -> Sequence[tuple[Param, Hashable]]:
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
                    nodes[child] = _Node(entry.provider, child, key, param.name)
        if inputs is not edges:  # it takes more than resolvers' values: maybe framework ones
            for declared in found.values:
                if declared not in self.used_values:
                    self.used_values.append(declared)
        node.inputs = inputs
        node.edges = edges
        return edges

    # -- shared sub-graphs --------------------------------------------------------------

    def close(self, key: Hashable) -> None:
        """Keep *key*'s whole sub-graph, now walked and checked, for later plans: from
        its own expansion and its children's sub-graphs, as a walk from *key* alone
        would meet them. Only for a shared expansion whose children are all kept."""
        memo = self.memo
        if memo is None:
            return
        found: Expansion | None = memo.get(key)
        nodes = self.nodes
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
        creations: dict[Hashable, _Node | tuple[Hashable, str, Provider]] = {}
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
        made_here: list[_Node] = []
        for child, made in creations.items():
            if isinstance(made, _Node):
                made_here.append(made)
                continue
            parent, param_name, provider = made  # a child of *key*: its node, complete
            entry = post[child]
            made_here.append(_Node(provider, child, parent, param_name, entry.edges, entry.inputs))
        found.closure = Closure(tuple(made_here), tuple(post.values()), tuple(values))

    def splice(self, key: Hashable, state: dict[Hashable, int], post: list[Hashable]) -> bool:
        """Add *key*'s kept sub-graph (see `close`) to this plan without walking it: the
        nodes, parents, post-order and value types the walk would give, each resolver
        already read and checked. False (walk it) when none is kept or when a node this
        plan already holds has another reading."""
        memo = self.memo
        if memo is None:
            return False
        found: Expansion | None = memo.get(key)
        nodes = self.nodes
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
        used = self.used_values
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
        for param in self.root.params:
            if param.marker is None:
                declared = self.value_type(param.bare)
                if declared is not None:
                    root_inputs.append(Input(param.name, "value", value_type=declared))
                continue
            start = self.target(param, param.marker, None)
            check_type(self, None, param, nodes[start])
            root_inputs.append((param, start))
            if state.get(start) == 2 or self.splice(start, state, post):
                continue
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
                        if self.splice(child, state, post):
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
                    self.close(key)
                    stack.pop()
                    edges_of.pop()
        # With no worker-thread step the sort keeps the walk's post-order as it is, so
        # the steps are built in that order, and again sorted if a step runs in a thread
        # (with overrides, sorted first: their checks raise in the plan's order).
        order = post if self.overrides is NO_OVERRIDES else self.sort(post)
        graph = self.build(order, root_inputs, _shared_arguments(tuple(arguments)))
        if graph.call_threads and order is post:
            graph = self.build(self.sort(post), root_inputs, graph.arguments)
        return graph

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

    def build(
        self,
        order: list[Hashable],
        root_inputs: list[Input | tuple[Param, Hashable]],
        arguments: tuple[str, ...],
    ) -> Graph:
        """The plan's steps in *order*, and what they hold (in the same pass).

        Each resolver has a slot, its steps' `Step.index` in every plan of the container
        (`Registry.slots`), so a step holds nothing of where it sits in a plan: a plan
        without overrides takes the step an earlier plan made for the same reading and
        inputs (`Expansion.step`), and makes only the steps of the resolvers new to it.
        A step that may ask is copied: its wire key and parameter are the plan's own.
        """
        scopes: set[Scope] = set()
        call_resources = call_threads = False
        registry = self.registry
        slots = registry.slot_table()
        taints: dict[Hashable, frozenset[int]] = {}
        wire_seen: dict[str, int] = {}
        steps: list[Step] = []
        nodes = self.nodes
        overridden = self.overrides is not NO_OVERRIDES
        memo = registry.expansions  # each resolver's step is its expansion's
        shared = self.memo  # None with overrides: their plans take no shared step
        for key in order:
            node = nodes[key]
            provider = node.provider
            expansion = memo.get(key)
            like = None
            if expansion is not None and expansion.provider is provider:
                like = expansion.step  # None until a plan built it
                if like is not None and expansion.inputs is node.inputs and not overridden:
                    scope = like.scope
                    scopes.add(scope)
                    if scope is _CALL:  # what the step says, as below (by identity: no hashing)
                        kind = like.kind
                        if kind is _SYNC:
                            call_threads = call_threads or not like.inline
                        elif kind is not _ASYNC:
                            call_resources = True
                    step = like
                    if step.may_ask:
                        step = _asking(step, wire_seen, step.wire_key, node.param)
                    steps.append(step)
                    continue
            taint = _NO_TAINT  # nothing is replaced
            if overridden:
                # A value built from a replacement is cached under the ids of the blocks
                # it depends on: another block (entered or left) does not rebuild it, and
                # leaving one of its blocks finds and closes it.
                replaced = self.replaced.get(key)
                taint = frozenset(() if replaced is None else (replaced,)).union(
                    *(taints.get(child, ()) for _, child in node.edges or ())
                )
                if taint:
                    taints[key] = taint
                    refuse_unclosable(self, node, taint, self.overrides.plain)
            if like is not None:
                # The resolver's step in other plans: all but its inputs (and, with
                # overrides, its key) hold here too.
                fn, name, scope, kind = like.fn, like.name, like.scope, like.kind
                inline, may_ask, base, awaits = (
                    like.inline,
                    like.may_ask,
                    like.wire_key,
                    like.awaits,
                )
            else:
                info = provider
                fn, name, scope, kind, awaits = (
                    info.fn,
                    info.name,
                    provider.scope,
                    info.kind,
                    info.awaits,
                )
                # An async factory made its context manager on the event loop: it is
                # entered and exited there too, not in a worker thread.
                inline = provider.inline or awaits
                may_ask = info.may_ask and scope is _CALL
                # Only a step that may ask has a wire key (its questions carry it).
                base = _wire_base(fn) if may_ask else ""
            scopes.add(scope)
            if scope is _CALL:
                call_resources = call_resources or kind.is_resource
                call_threads = call_threads or (kind is _SYNC and not provider.inline)
            slot = slots.get(key)
            if slot is None:
                slot = registry.new_slot(key)
            # Positional, in field order (a step per resolver: keywords cost twice as
            # much): index, fn, name, key, scope, kind, inline, may_ask, inputs, param,
            # awaits. Only a step that may ask has a wire key (an `AskingStep`).
            fields = (
                slot,
                fn,
                name,
                ("override", taint, key) if taint else key,
                scope,
                kind,
                inline,
                may_ask,
                _inputs(node.inputs, slots, True),
                node.param,
                awaits,
            )
            step = AskingStep(base, *fields) if may_ask else Step(*fields)
            if (
                shared is not None
                and expansion is not None
                and expansion.provider is provider
                and expansion.inputs is node.inputs
            ):
                # Its inputs are its resolver's checked expansion, the same object in
                # every plan that reads it so: later plans take this step.
                expansion.step = step
            if may_ask:
                step = _asking(step, wire_seen, base, node.param)
            steps.append(step)
        return Graph(
            self.root,
            tuple(steps),
            _inputs(root_inputs, slots),
            arguments,
            tuple(self.used_values),
            _scope_set(scopes),
            call_resources,
            call_threads,
        )


def _asking(step: Step, wire_seen: dict[str, int], base: str, param: str) -> Step:
    """The plan's own copy of a step that may ask (same slot, same inputs): its wire key
    (*base*, numbered from the second asking step of the plan with that base on) and the
    parameter its questions name."""
    count = wire_seen.get(base, 0)
    wire_seen[base] = count + 1
    wire_key = base if count == 0 else f"{base}#{count}"
    return AskingStep(
        wire_key,
        step.index,
        step.fn,
        step.name,
        step.key,
        step.scope,
        step.kind,
        step.inline,
        step.may_ask,
        step.inputs,
        param,
        step.awaits,
    )


def _inputs(
    items: Sequence[Input | tuple[Param, Hashable]],
    slots: dict[Hashable, int],
    step_of: bool = False,
) -> tuple[Input, ...]:
    """The plan's inputs for *items*: a resolver edge becomes the input of its step.

    A step's tuple (*step_of*) is a value too: one made only of shared inputs (of a step's
    value, of a call argument without default) is the one every step with those inputs
    shares, in any container (the same resolvers compiled twice). A handler's own inputs
    are made once per plan, as they were: looking them up would cost each compile."""
    if not items:
        return ()
    made: list[Input] = []
    # What the tuple holds, while it holds only shared inputs: each one's name and
    # step (-1 for a call argument), which are the input.
    shape: list[str | int] | None = [] if step_of else None
    for item in items:
        if isinstance(item, Input):
            made.append(item)
            if shape is not None:
                if item.source == "arg" and item.default is NO_DEFAULT:
                    shape += (item.name, -1)
                else:
                    shape = None
            continue
        param, child = item
        step = slots[child]
        if param.outcome is not None:
            made.append(Input(param.name, "step", step=step, outcome=param.outcome))
            shape = None
            continue
        # Inputs are values: every plan shares the one for a parameter name and step.
        found = _STEP_INPUTS.get((param.name, step))
        if found is None:
            found = keep_shared(
                _STEP_INPUTS, (param.name, step), Input(param.name, "step", step=step)
            )
        made.append(found)
        if shape is not None:
            shape += (param.name, step)
    if shape is None:
        return tuple(made)
    key = tuple(shape)
    shared = _INPUT_TUPLES.get(key)
    return keep_shared(_INPUT_TUPLES, key, tuple(made)) if shared is None else shared


def _arg_input(name: str, default: Any) -> Input:
    """The input of the call argument *name*: one that has no default is a value every
    plan shares, as a step's input is."""
    if default is not NO_DEFAULT:
        return Input(name, "arg", arg=name, default=default)
    found = _ARG_INPUTS.get(name)
    return keep_shared(_ARG_INPUTS, name, Input(name, "arg", arg=name)) if found is None else found


_ARG_INPUTS: dict[str, Input] = {}


def _shared_arguments(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names of a handler's own arguments: the one tuple every plan whose handler
    takes the same ones shares, as a value."""
    found = _ARGUMENTS.get(names)
    return keep_shared(_ARGUMENTS, names, names) if found is None else found


_ARGUMENTS: dict[tuple[str, ...], tuple[str, ...]] = {}
_STEP_INPUTS: dict[tuple[str, int], Input] = {}
_INPUT_TUPLES: dict[tuple[str | int, ...], tuple[Input, ...]] = {}

_NO_TAINT: frozenset[int] = frozenset()
_CALL = Scope.CALL  # read per step: a module global, not an enum class attribute
_SYNC = Kind.SYNC
_ASYNC = Kind.ASYNC  # with _SYNC, the kinds that are no resource


def _scope_set(scopes: set[Scope]) -> frozenset[Scope]:
    """The plan's scopes as the one frozenset every plan with those scopes shares (there
    are eight: a frozenset of three costs a plan more than its pointer)."""
    made = frozenset(scopes)
    return _SCOPE_SETS.setdefault(made, made)


_SCOPE_SETS: dict[frozenset[Scope], frozenset[Scope]] = {}


def build_graph(
    fn: Callable[..., Any],
    registry: Registry,
    overrides: Overrides,
    value_types: tuple[type, ...],
) -> Graph:
    """Compile *fn*'s resolver graph into topologically sorted steps.

    Raises:
        InvalidSignature: on any mistake in the graph, before anything runs.
    """
    return _Compiler(fn, registry, overrides, value_types).run()


def _threaded(node: _Node) -> bool:
    """Whether *node*'s step runs in a worker thread (a plain sync CALL function)."""
    provider = node.provider
    return provider.scope is Scope.CALL and _threaded_kind(provider.kind, provider.inline)


def _threaded_kind(kind: Kind, inline: bool) -> bool:
    return kind is Kind.SYNC and not inline


def _wire_base(fn: Any) -> str:
    """A resolver's question key on the wire: ``module:qualname``, as the MCP SDK spells it.

    Stable across processes (a later round may run on another worker); resolvers that
    share it are numbered by the caller (``base``, ``base#1``, ...).
    """
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}:{qualname}"
