"""The graph compiler: walk a function's resolvers, validate the graph, sort it.

The walk is iterative (a 10,000-resolver chain compiles at the default recursion
limit). Every mistake is an `InvalidSignature` whose text names the functions, the
parameter, the path from the compiled function, and a fix.
"""

from __future__ import annotations

import functools
import heapq
import re
import types
import typing
from collections.abc import Callable, Hashable
from typing import Any, get_args, get_origin

from ._annotations import NO_DEFAULT, Unresolved, type_name, unresolved_error
from ._errors import InvalidSignature, ResolventError
from ._kinds import Kind, entered_class, enters_unknown
from ._markers import Resolve, is_inline
from ._plan import Input, Step
from ._record import field, record
from ._registry import Provider, Registry, read, resolver_key
from ._scopes import Scope
from ._signature import FunctionInfo, Param
from ._typecheck import accepted_data, may_hold

__all__ = ("NO_OVERRIDES", "Graph", "Overrides", "build_graph")


@record
class Overrides:
    """The overrides active in one context: immutable, one layer per open block.

    ``by_key`` and ``by_type`` map a target to ``(block id, replacement)``; ``stamp`` (the
    open blocks' ids, in order) identifies the set for plan caching.
    """

    by_key: dict[Hashable, tuple[int, Callable[..., Any]]] = field(
        default_factory=dict[Hashable, tuple[int, Callable[..., Any]]]
    )
    by_type: dict[Any, tuple[int, Callable[..., Any]]] = field(
        default_factory=dict[Any, tuple[int, Callable[..., Any]]]
    )
    stamp: tuple[int, ...] = ()
    layers: tuple[Any, ...] = ()  # the open blocks, in order of entry
    plain: dict[int, str] = field(default_factory=dict[int, str])
    """The blocks entered with a plain ``with`` (they cannot await a close): id -> how
    the block was written, for messages."""


NO_OVERRIDES = Overrides()


@record
class Graph:
    """What the compiler hands to code generation."""

    root: FunctionInfo
    steps: tuple[Step, ...]
    inputs: tuple[Input, ...]
    arguments: tuple[str, ...]
    value_types: tuple[Any, ...]


@record(frozen=False)
class _Node:
    provider: Provider
    key: Hashable
    replaced: int | None  # the id of the override block that put this node here
    parent: Hashable | None
    param: str
    replaces: Hashable = None  # the key of the provider this node stands in for
    edges: list[tuple[Param, Hashable]] | None = None
    inputs: list[Input | tuple[Param, Hashable]] = field(
        default_factory=list[Input | tuple[Param, Hashable]]
    )

    @property
    def name(self) -> str:
        return self.provider.info.name


class _Compiler:
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
        self.root_args: dict[str, Param] = {}
        self.used_values: list[Any] = []
        # A resolver's checked expansion, shared by the plans that use it; none while
        # overrides are active (a replacement changes what a key expands to).
        self.memo = registry.expansions if overrides is NO_OVERRIDES else None

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

    def path(self, key: Hashable | None, param: str = "") -> str:
        hops: list[str] = []
        while key is not None and len(hops) < 24:
            node = self.nodes[key]
            hops.append(node.name + (f"({param}=...)" if param else ""))
            param, key = node.param, node.parent
        hops.append(f"{self.root.name}({param}=...)")
        return " -> ".join(reversed(hops))

    def names(self, key: Hashable | None) -> tuple[str, ...]:
        """The functions from the compiled one down to *key*, for drawing errors."""
        names: list[str] = []
        while key is not None:
            node = self.nodes[key]
            names.append(node.name)
            key = node.parent
        names.append(self.root.name)
        return tuple(reversed(names))

    def target(self, param: Param, marker: Resolve, consumer: Hashable | None) -> Hashable:
        """The node for *marker* on *param* of *consumer*, created if new."""
        where = f"parameter {param.name!r} of {self._name(consumer)}"
        replaced: int | None = None
        if marker.fn is None:
            fn, replaced = self._by_type(param, where, consumer)
        else:
            fn = marker.fn
        key = resolver_key(fn)
        found = self.overrides.by_key.get(key)
        if found is not None and consumer is not None and self.nodes[consumer].replaces == key:
            found = None  # inside its replacement (a spy), Resolve(original) is the original
        existing = key if found is None else resolver_key(found[1])
        if existing in self.nodes:  # already read: each function is read once per compile
            return existing
        original = self.registry.implicit(fn)
        replaces: Hashable = None
        if found is not None:
            replaced, replacement = found
            provider = self.registry.get(replacement) or Provider(
                read(replacement),
                original.scope,
                original.inline or is_inline(replacement),
                registered=False,
            )
            replaces, key = key, existing
        else:
            provider = original
        provider.info.needs_return()
        self.nodes[key] = _Node(provider, key, replaced, consumer, param.name, replaces=replaces)
        return key

    def _by_type(
        self, param: Param, where: str, consumer: Hashable | None
    ) -> tuple[Callable[..., Any], int | None]:
        tp = param.bare
        found = self.overrides.by_type.get(tp)
        if found is not None:
            return found[1], found[0]
        offered = self.registry.for_type(tp)
        if len(offered) == 1:
            return offered[0].fn, None
        if not offered:
            raise InvalidSignature(
                f"{where} asks for Resolve() by type {type_name(tp)}, but no provider offers it.\n"
                f"  path: {self.path(consumer, param.name)}\n"
                f"{self._entering(tp)}"
                f"  fix: register one (`@container.provider(...)` on a function returning "
                f"{type_name(tp)}, or `provides={type_name(tp)}`), or name it: Resolve(fn)"
            )
        names = ", ".join(p.info.name for p in offered)
        first = getattr(offered[0].fn, "__name__", offered[0].info.name)  # partials have none
        raise InvalidSignature(
            f"{where} asks for Resolve() by type {type_name(tp)}, which {len(offered)} providers "
            f"offer: {names}.\n"
            f"  path: {self.path(consumer, param.name)}\n"
            f"  fix: name the one you mean: "
            f"Annotated[{type_name(tp)}, Resolve({first})]"
        )

    def _entering(self, tp: Any) -> str:
        """A note naming the providers that return *tp*, a context manager, but offer what
        entering it gives; empty when there are none."""
        notes = [
            f"  note: {p.info.name} returns {type_name(tp)}, a context manager, so it offers "
            f"what entering it gives, {type_name(p.info.provides)}; to offer the "
            f"{type_name(tp)} itself, not entered, annotate it `-> Any` and register it "
            f"with `provides={type_name(tp)}`\n"
            for p in self.registry.by_key.values()
            if entered_class(p.info.fn, p.info.kind) == tp
        ]
        return "".join(notes)

    def _name(self, key: Hashable | None) -> str:
        return self.root.name if key is None else self.nodes[key].name

    def expand(self, key: Hashable) -> list[tuple[Param, Hashable]]:
        """Classify every parameter of one resolver; return its resolver edges."""
        node = self.nodes[key]
        if node.edges is not None:
            return node.edges
        memo = self.memo if node.replaced is None and node.replaces is None else None
        if memo is not None:
            found = memo.get(key)
            if found is not None and found[0] is node.provider:
                return self._replay(node, found)
        info, scope = node.provider.info, node.provider.scope
        edges: list[tuple[Param, Hashable]] = []
        values: list[Any] = []
        for param in info.params:
            if param.marker is not None:
                child = self.target(param, param.marker, key)
                self._check_type(key, param, self.nodes[child])
                self._check_lifetime(node, param, self.nodes[child])
                edges.append((param, child))
                node.inputs.append((param, child))
                continue
            declared = self.value_type(param.bare)
            if declared is not None:
                if scope > Scope.CALL:
                    self._captive_source(node, param, f"the framework value {type_name(declared)}")
                node.inputs.append(Input(param.name, "value", value_type=declared))
                values.append(declared)
                continue
            memo = None  # classified by the handler's own arguments: not shared
            root_param = self.root_args.get(param.name)
            if root_param is not None:
                if scope > Scope.CALL:
                    self._captive_source(node, param, f"the call argument {param.name!r}")
                default = (
                    root_param.default if root_param.default is not NO_DEFAULT else param.default
                )
                node.inputs.append(Input(param.name, "arg", arg=param.name, default=default))
                continue
            if param.default is not NO_DEFAULT:
                continue
            self._unclassifiable(node, param)
        node.edges = edges
        if memo is not None and not any(self.nodes[c].replaced is not None for _, c in edges):
            if len(memo) >= 4096:
                memo.clear()
            children = tuple(self.nodes[c].provider for _, c in edges)
            memo[key] = (node.provider, tuple(edges), children, tuple(node.inputs), tuple(values))
        return edges

    def _replay(self, node: _Node, found: tuple[Any, ...]) -> list[tuple[Param, Hashable]]:
        """*node*'s expansion as an earlier plan checked it: the same edges and inputs,
        children created where this plan has not met them yet."""
        _, edges, children, inputs, values = found
        nodes = self.nodes
        for (param, child), provider in zip(edges, children, strict=True):
            if child not in nodes:
                nodes[child] = _Node(provider, child, None, node.key, param.name)
        for declared in values:
            if declared not in self.used_values:
                self.used_values.append(declared)
        node.inputs = list(inputs)
        node.edges = list(edges)
        return node.edges

    def _unclassifiable(self, node: _Node, param: Param) -> None:
        if isinstance(param.bare, Unresolved):
            raise unresolved_error(
                node.provider.fn, param.name, param.bare.name, "its type to classify it"
            )
        args = ", ".join(self.root_args) or "none"
        values = ", ".join(type_name(v) for v in self.value_types) or "none"
        raise InvalidSignature(
            f"cannot resolve parameter {param.name!r} of {node.name}.\n"
            f"  path: {self.path(node.key, param.name)}\n"
            f"  it is not Annotated[..., Resolve(...)], not a call argument of {self.root.name} "
            f"(those are: {args}), not a declared framework value (declared: {values}), "
            "and it has no default.\n"
            f"  fix: annotate it "
            f"`{param.name}: Annotated[{type_name(param.bare)}, Resolve(provider)]`, "
            f"declare its type with container.add_value_type(...), or give it a default"
        )

    def _check_type(self, consumer: Hashable | None, param: Param, child: _Node) -> None:
        """Refuse `Annotated[T, Resolve(fn)]` when fn's declared type can never be a T."""
        info = child.provider.info
        if (
            child.replaced  # a fake stands in: its types are the test's business
            or param.marker is None
            or param.marker.fn is None  # found by type: compatible by construction
            or (isinstance(info.fn, type) and info.kind is Kind.SYNC and _is_cm_class(info.fn))
            or enters_unknown(info.kind, info.provides)
        ):
            return
        if param.outcome is not None or info.may_ask:
            self._check_answer(consumer, param, info)
            return
        if may_hold(param.bare, info.provides):
            return
        wanted, provided = type_name(param.bare), type_name(info.provides)
        produces = "yields" if info.kind.is_resource else "returns"
        short = getattr(info.fn, "__name__", None) or info.name
        entered = entered_class(info.fn, info.kind)
        if entered is not None and may_hold(param.bare, entered):
            self._entered_instead(consumer, param, info, entered)
        raise InvalidSignature(
            f"parameter {param.name!r} of {self._name(consumer)} expects {wanted}, but its "
            f"resolver {info.name} {produces} {provided}.\n"
            f"  path: {self.path(consumer, param.name)}\n"
            f"  fix: annotate it `{param.name}: Annotated[{provided}, Resolve({short})]`, "
            f"or make {info.name} {produces[:-1]} {wanted}"
        )

    def _refuse_unclosable(self, node: _Node, taint: frozenset[int]) -> None:
        """Refuse an async APP/SESSION resource built from a plain ``with`` override: leaving
        the block could not await its close, so it would stay open until its scope closes."""
        provider, kind = node.provider, node.provider.info.kind
        plain = sorted(taint & self.overrides.plain.keys())
        if not plain or provider.scope is Scope.CALL or not (kind.is_resource and kind.is_async):
            return
        block = self.overrides.plain[plain[0]]
        raise ResolventError(
            f"{node.name} ({provider.scope!r}) is an async resource built from the replacement "
            f"of `with {block}:`, a plain `with` block: leaving it cannot await the resource's "
            f"close, so it would stay open until the {provider.scope.name} scope closes.\n"
            f"  path: {self.path(node.key)}\n"
            f"  fix: `async with {block}:`; in pytest, enter it in an async fixture, or use the "
            "resolvent_override fixture in an anyio test (it closes the block asynchronously)"
        )

    def _check_answer(self, consumer: Hashable | None, param: Param, info: FunctionInfo) -> None:
        """Refuse a consumer whose T cannot hold what a resolver that may ask gives: the
        answer's schema (``S`` in ``Elicit[S]``) and the value it returns when it does
        not ask. An outcome consumer (``ElicitationResult[T]``, ``Accepted[T]``) is
        judged by its ``T``."""
        wanted = param.bare if param.outcome is None else accepted_data(param.bare)
        answer = info.asks if info.may_ask else NO_DEFAULT
        # With an unknown answer (``Sample | dict``: the core cannot tell what a Sample is
        # answered with) the other arm alone decides nothing, as the SDK accepts it.
        plain = (
            NO_DEFAULT if info.may_ask and answer in (NO_DEFAULT, info.provides) else info.provides
        )
        arms = [t for t in (plain, answer) if t is not NO_DEFAULT]
        # One related arm is enough, as for a resolver declaring a union.
        if not arms or may_hold(wanted, typing.Union[tuple(arms)]):  # noqa: UP007
            return
        want, short = type_name(wanted), getattr(info.fn, "__name__", None) or info.name
        gives: list[str] = []
        if plain is not NO_DEFAULT:
            gives.append(
                f"returns {type_name(plain)}" + (" when it does not ask" if arms[1:] else "")
            )
        if answer is not NO_DEFAULT:
            gives.append(f"asks a question whose accepted answer is a {type_name(answer)}")
        given = " | ".join(type_name(t) for t in arms)
        if param.outcome is None:
            expects, annotated = want, given
        else:  # the consumer's own outcome form, with the data type the resolver gives
            form = type_name(param.bare)
            expects = f"{form} (accepted data: {want})"
            annotated = re.sub(rf"(?<![\w.]){re.escape(want)}(?![\w.])", given, form)
        if answer is NO_DEFAULT:
            change = f", or make {short} return {want}"
        elif isinstance(wanted, type) and hasattr(wanted, "model_validate"):  # a schema
            change = f", or make {short} ask for a {want}: `Elicit(message, {want})`"
        else:
            change = ""
        raise InvalidSignature(
            f"parameter {param.name!r} of {self._name(consumer)} expects {expects}, but its "
            f"resolver {info.name} {' and '.join(gives)}.\n"
            f"  path: {self.path(consumer, param.name)}\n"
            f"  fix: annotate it `{param.name}: Annotated[{annotated}, Resolve({short})]`{change}"
        )

    def _entered_instead(
        self, consumer: Hashable | None, param: Param, info: FunctionInfo, entered: Any
    ) -> None:
        """The consumer wants the context manager itself; the provider injects what
        entering it gives."""
        cls, method = type_name(entered), "__aenter__" if info.kind.is_async else "__enter__"
        short = getattr(info.fn, "__name__", None) or info.name
        raise InvalidSignature(
            f"parameter {param.name!r} of {self._name(consumer)} expects {type_name(param.bare)}, "
            f"but its resolver {info.name} returns {cls}, a context manager: resolvent enters "
            f"it for the scope and injects what {method} gives, {type_name(info.provides)}.\n"
            f"  path: {self.path(consumer, param.name)}\n"
            f"  fix: to inject the {cls} itself, not entered, annotate {short} `-> Any` "
            f"instead of `-> {cls}` (and register it with `provides={cls}` to find it by "
            f"type); to use what it enters, annotate it "
            f"`{param.name}: Annotated[{type_name(info.provides)}, Resolve({short})]`"
        )

    def _check_lifetime(self, node: _Node, param: Param, child: _Node) -> None:
        outer, inner = node.provider.scope, child.provider.scope
        if inner >= outer:
            return
        raise InvalidSignature(
            f"captive dependency: {node.name} ({outer!r}) depends on {child.name} ({inner!r}) "
            f"through parameter {param.name!r}.\n"
            f"  path: {self.path(node.key, param.name)} -> {child.name}\n"
            f"  a {outer!r} value outlives every {inner.name} scope, so it would keep the first "
            f"{inner.name}'s {child.name} forever.\n"
            f"  fix: register {child.name} with scope={outer!r} or longer, or register "
            f"{node.name} with scope={inner!r}",
            path=(*self.names(node.key), child.name),
            offending=1,
        )

    def _captive_source(self, node: _Node, param: Param, what: str) -> None:
        scope = node.provider.scope
        raise InvalidSignature(
            f"captive dependency: {node.name} ({scope!r}) takes {what} through parameter "
            f"{param.name!r}, but that only exists for one call.\n"
            f"  path: {self.path(node.key, param.name)}\n"
            f"  fix: register {node.name} with scope=Scope.CALL, or move the use of "
            f"{param.name!r} into a CALL-scoped resolver that depends on it"
        )

    def _check_asks(self, node: _Node) -> None:
        info, scope = node.provider.info, node.provider.scope
        if scope > Scope.CALL and info.may_ask and info.provides is not NO_DEFAULT:
            returns = info.provides
            if (
                returns is not Any
                and returns is not object
                and not isinstance(returns, typing.TypeVar)
            ):
                raise InvalidSignature(
                    f"{node.name} is registered with scope={scope!r} but may return a question; "
                    "only CALL-scoped resolvers may ask.\n"
                    "  fix: move the question into a CALL-scoped resolver that depends on "
                    f"{node.name}"
                )

    # -- the walk --------------------------------------------------------------------

    def cycle(self, stack: list[tuple[Hashable, int]], child: Hashable) -> InvalidSignature:
        keys = [key for key, _ in stack]
        start = keys.index(child)
        hops: list[str] = []
        for key, index in stack[start:]:
            param = self.expand(key)[index - 1][0].name
            hops.append(f"{self.nodes[key].name}({param}=...)")
        hops.append(self.nodes[child].name)
        return InvalidSignature(
            f"dependency cycle: {' -> '.join(hops)}.\n"
            f"  path: {self.path(stack[start][0])}\n"
            "  fix: break the cycle: one of these resolvers must not depend on the others "
            "(pass the value as a call argument, or split the resolver in two)",
            path=(
                *self.names(stack[start][0]),
                *(self.nodes[k].name for k, _ in stack[start + 1 :]),
                self.nodes[child].name,
            ),
            offending=len(stack) - start,
        )

    def run(self) -> Graph:
        root_inputs: list[Input | tuple[Param, Hashable]] = []
        arguments: list[str] = []
        for param in self.root.params:
            if param.marker is None and self.value_type(param.bare) is None:
                self.root_args[param.name] = param
                arguments.append(param.name)
        post: list[Hashable] = []
        state: dict[Hashable, int] = {}
        for param in self.root.params:
            if param.marker is None:
                declared = self.value_type(param.bare)
                if declared is not None:
                    root_inputs.append(Input(param.name, "value", value_type=declared))
                continue
            start = self.target(param, param.marker, None)
            self._check_type(None, param, self.nodes[start])
            root_inputs.append((param, start))
            if state.get(start) == 2:
                continue
            state[start] = 1
            stack: list[tuple[Hashable, int]] = [(start, 0)]
            while stack:
                key, index = stack[-1]
                edges = self.expand(key)
                if index < len(edges):
                    stack[-1] = (key, index + 1)
                    child = edges[index][1]
                    seen = state.get(child)
                    if seen is None:
                        state[child] = 1
                        stack.append((child, 0))
                    elif seen == 1:
                        raise self.cycle(stack, child)
                else:
                    state[key] = 2
                    self._check_asks(self.nodes[key])
                    post.append(key)
                    stack.pop()
        order = self.sort(post)
        return self.build(order, root_inputs, tuple(arguments))

    def sort(self, post: list[Hashable]) -> list[Hashable]:
        """Topological order (Kahn) that keeps worker-thread steps adjacent.

        Adjacent sync steps share one thread hop, so among ready steps the sort prefers
        to continue a run of thread steps, and otherwise runs loop steps first.
        """
        rank = {key: i for i, key in enumerate(post)}
        pending = {key: len({c for _, c in self.nodes[key].edges or ()}) for key in post}
        consumers: dict[Hashable, list[Hashable]] = {key: [] for key in post}
        for key in post:
            for child in {c for _, c in self.nodes[key].edges or ()}:
                consumers[child].append(key)
        threaded: list[int] = []
        other: list[int] = []

        def push(key: Hashable) -> None:
            provider = self.nodes[key].provider
            is_thread = provider.info.kind.value == "function" and not provider.inline
            heapq.heappush(
                threaded if is_thread and provider.scope is Scope.CALL else other, rank[key]
            )

        for key in post:
            if pending[key] == 0:
                push(key)
        order: list[Hashable] = []
        last_threaded = False
        while threaded or other:
            if threaded and (last_threaded or not other):
                key = post[heapq.heappop(threaded)]
                last_threaded = True
            else:
                key = post[heapq.heappop(other)]
                last_threaded = False
            order.append(key)
            for consumer in consumers[key]:
                pending[consumer] -= 1
                if pending[consumer] == 0:
                    push(consumer)
        return order

    def build(
        self,
        order: list[Hashable],
        root_inputs: list[Input | tuple[Param, Hashable]],
        arguments: tuple[str, ...],
    ) -> Graph:
        index = {key: i for i, key in enumerate(order)}
        taints: dict[Hashable, frozenset[int]] = {}
        wire_seen: dict[str, int] = {}
        steps: list[Step] = []
        for key in order:
            node = self.nodes[key]
            # A value built from a replacement is cached under the ids of the blocks it
            # depends on: another block (entered or left) does not rebuild it, and leaving
            # one of its blocks finds and closes it.
            taint = (
                frozenset(() if node.replaced is None else (node.replaced,)).union(
                    *(taints.get(child, ()) for _, child in node.edges or ())
                )
                if self.overrides is not NO_OVERRIDES
                else _NO_TAINT  # nothing is replaced
            )
            if taint:
                taints[key] = taint
                self._refuse_unclosable(node, taint)
            base = _wire_base(node.provider.fn)
            count = wire_seen.get(base, 0)
            wire_seen[base] = count + 1
            provider = node.provider
            steps.append(
                Step(
                    index=index[key],
                    fn=provider.fn,
                    name=node.name,
                    key=("override", taint, key) if taint else key,
                    scope=provider.scope,
                    kind=provider.info.kind,
                    # An async factory made its context manager on the event loop:
                    # it is entered and exited there too, not in a worker thread.
                    inline=provider.inline or provider.info.awaits,
                    may_ask=provider.info.may_ask and provider.scope is Scope.CALL,
                    inputs=tuple(self._input(item, index) for item in node.inputs),
                    wire_key=base if count == 0 else f"{base}#{count}",
                    parent=index[node.parent] if node.parent is not None else -1,
                    param=node.param,
                    awaits=provider.info.awaits,
                )
            )
        return Graph(
            root=self.root,
            steps=tuple(steps),
            inputs=tuple(self._input(item, index) for item in root_inputs),
            arguments=arguments,
            value_types=tuple(self.used_values),
        )

    @staticmethod
    def _input(item: Input | tuple[Param, Hashable], index: dict[Hashable, int]) -> Input:
        if isinstance(item, Input):
            return item
        param, child = item
        return Input(param.name, "step", step=index[child], outcome=param.outcome)


_NO_TAINT: frozenset[int] = frozenset()


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


def _is_cm_class(cls: type) -> bool:
    """A class whose instances are context managers: the value is what it enters."""
    return hasattr(cls, "__enter__") or hasattr(cls, "__aenter__")


def _wire_base(fn: Any) -> str:
    """A resolver's question key on the wire: ``module:qualname``, as the MCP SDK spells it.

    Stable across processes (a later round may run on another worker); resolvers that
    share it are numbered by the caller (``base``, ``base#1``, ...).
    """
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}:{qualname}"
