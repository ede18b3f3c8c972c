"""The compiler's checks on the graph it walks, and their error messages.

Reads the nodes the walk made and raises `InvalidSignature` (or `ResolventError`) naming the
functions, the parameter, the path and a fix; never walks, sorts or changes the graph.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._reading.annotations import NO_DEFAULT, Unresolved, type_name, unresolved_error
from .._reading.kinds import Kind, entered_class, enters_unknown
from .._reading.params import Param
from .._reading.signature import FunctionInfo
from .._reading.typecheck import accepted_data, may_hold
from .._vocabulary.errors import InvalidSignature, ResolventError
from .._vocabulary.scopes import Scope
from .registry import LASTING, Provider, Registry

__all__ = ("Node", "Walk", "check_lifetime", "check_type", "cycle", "path")


if TYPE_CHECKING:

    class Node(Protocol):
        """One resolver as the walk met it: what the checks read of a compiler node."""

        @property
        def provider(self) -> Provider: ...
        @property
        def key(self) -> Hashable: ...
        @property
        def name(self) -> str: ...
        @property
        def parent(self) -> Hashable | None: ...
        @property
        def param(self) -> str:
            """The parameter of *parent* this node was first met through."""
            ...

    class Walk(Protocol):
        """The compiler's walk, as the checks read it to say where a mistake is."""

        @property
        def root(self) -> FunctionInfo: ...
        @property
        def nodes(self) -> Mapping[Hashable, Node]: ...
        @property
        def replaced(self) -> Mapping[Hashable, int]:
            """key -> the id of the override block that put its node here."""
            ...

        def expand(self, key: Hashable) -> Sequence[tuple[Param, Hashable]]: ...


# -- where: the path from the compiled function ------------------------------------------


def name_of(walk: Walk, key: Hashable | None) -> str:
    """The name of the resolver at *key*; the compiled function's for None."""
    return walk.root.name if key is None else walk.nodes[key].name


_SHOWN = 24  # the calls a path shows above the mistake; those between them and the root: ...


def path(walk: Walk, key: Hashable | None, param: str = "") -> str:
    """The calls from the compiled function down to *key* (and its *param*), for messages."""
    hops: list[str] = []
    while key is not None:  # a node's parent was met before it: the chain ends at the root
        node = walk.nodes[key]
        hops.append(node.name + (f"({param}=...)" if param else ""))
        param, key = node.param, node.parent
    hops.append(f"{walk.root.name}({param}=...)")
    if len(hops) > _SHOWN + 1:
        hops[_SHOWN:-1] = ["..."]
    return " -> ".join(reversed(hops))


def names(walk: Walk, key: Hashable | None) -> tuple[str, ...]:
    """The functions from the compiled one down to *key*, for drawing errors."""
    found: list[str] = []
    while key is not None:
        node = walk.nodes[key]
        found.append(node.name)
        key = node.parent
    found.append(walk.root.name)
    return tuple(reversed(found))


# -- finding a provider ------------------------------------------------------------------


def no_provider(
    walk: Walk, registry: Registry, where: str, tp: Any, consumer: Hashable | None, param: str
) -> InvalidSignature:
    """The error for ``Resolve()`` by a type that no provider offers."""
    member = _offered_member(registry, tp)
    if member is not None:  # `Db | None` where a provider offers Db
        fix = (
            f"  fix: {member[1]} offers {type_name(member[0])}, and Resolve() finds a "
            "provider by the exact type it offers: "
            f"`{param}: Annotated[{type_name(member[0])}, Resolve()]`\n"
        )
    else:
        fix = (
            f"  fix: register one (`@container.provider(...)` on a function returning "
            f"{type_name(tp)}, or `provides={type_name(tp)}`), or name it: Resolve(fn)\n"
        )
    return InvalidSignature(
        f"{where} asks for Resolve() by type {type_name(tp)}, but no provider offers it.\n"
        f"  path: {path(walk, consumer, param)}\n"
        f"{_entering(registry, tp)}{fix.rstrip()}"
    )


def _offered_member(registry: Registry, tp: Any) -> tuple[Any, str] | None:
    """For a union such as ``Db | None``: a member that exactly one provider offers, and
    that provider's name; else None."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    for member in typing.get_args(tp):
        offered = registry.for_type(member) if member is not type(None) else []
        if len(offered) == 1:
            return member, offered[0].name
    return None


def ambiguous(
    walk: Walk,
    offered: list[Provider],
    where: str,
    tp: Any,
    consumer: Hashable | None,
    param: str,
) -> InvalidSignature:
    """The error for ``Resolve()`` by a type that several providers offer."""
    offers = ", ".join(p.name for p in offered)
    first = getattr(offered[0].fn, "__name__", offered[0].name)  # partials have none
    return InvalidSignature(
        f"{where} asks for Resolve() by type {type_name(tp)}, which {len(offered)} providers "
        f"offer: {offers}.\n"
        f"  path: {path(walk, consumer, param)}\n"
        f"  fix: name the one you mean: "
        f"Annotated[{type_name(tp)}, Resolve({first})]"
    )


def _entering(registry: Registry, tp: Any) -> str:
    """A note naming the providers that return *tp*, a context manager, but offer what
    entering it gives; empty when there are none."""
    notes = [
        f"  note: {p.name} returns {type_name(tp)}, a context manager, so it offers "
        f"what entering it gives, {type_name(p.provides)}; to offer the "
        f"{type_name(tp)} itself, not entered, annotate it `-> Any` and register it "
        f"with `provides={type_name(tp)}`\n"
        for p in registry.by_key.values()
        if entered_class(p.fn, p.kind) == tp
    ]
    return "".join(notes)


def unclassifiable(
    walk: Walk,
    node: Node,
    param: Param,
    arguments: Mapping[str, Param],
    value_types: tuple[Any, ...],
) -> None:
    """Raise for a parameter that is no marker, call argument, framework value or default."""
    if isinstance(param.bare, Unresolved):
        raise unresolved_error(
            node.provider.fn, param.name, param.bare.name, "its type to classify it"
        )
    args = ", ".join(arguments) or "none"
    values = ", ".join(type_name(v) for v in value_types) or "none"
    raise InvalidSignature(
        f"cannot resolve parameter {param.name!r} of {node.name}.\n"
        f"  path: {path(walk, node.key, param.name)}\n"
        f"  it is not Annotated[..., Resolve(...)], not a call argument of {walk.root.name} "
        f"(those are: {args}), not a declared framework value (declared: {values}), "
        "and it has no default.\n"
        f"  fix: annotate it "
        f"`{param.name}: Annotated[{type_name(param.bare)}, Resolve(provider)]`, "
        f"declare its type with container.add_value_type(...), or give it a default"
    )


# -- types: what a consumer expects and what its resolver gives --------------------------


_ENTERED = Kind.ASYNC_CONTEXT_MANAGER  # the kinds `enters_unknown` may say yes of
_ENTERED_SYNC = Kind.CONTEXT_MANAGER


def check_type(walk: Walk, consumer: Hashable | None, param: Param, child: Node) -> None:
    """Refuse `Annotated[T, Resolve(fn)]` when fn's declared type can never be a T."""
    info = child.provider
    kind = info.kind
    if (
        child.key in walk.replaced  # a fake stands in: its types are the test's business
        or param.marker is None
        or param.marker.fn is None  # found by type: compatible by construction
        or ((kind is _ENTERED or kind is _ENTERED_SYNC) and enters_unknown(kind, info.provides))
    ):
        return
    if param.outcome is not None or info.may_ask:
        _check_answer(walk, consumer, param, info)
        return
    # A parameter annotated with its resolver's own return type (the usual case) holds it:
    # judged here, without asking `may_hold`.
    if param.bare is info.provides or may_hold(param.bare, info.provides):
        return
    wanted, provided = type_name(param.bare), type_name(info.provides)
    produces = "yields" if info.kind.is_resource else "returns"
    short = getattr(info.fn, "__name__", None) or info.name
    entered = entered_class(info.fn, info.kind)
    if entered is not None and may_hold(param.bare, entered):
        _entered_instead(walk, consumer, param, info, entered)
    raise InvalidSignature(
        f"parameter {param.name!r} of {name_of(walk, consumer)} expects {wanted}, but its "
        f"resolver {info.name} {produces} {provided}.\n"
        f"  path: {path(walk, consumer, param.name)}\n"
        f"  fix: annotate it `{param.name}: Annotated[{provided}, Resolve({short})]`, "
        f"or make {info.name} {produces[:-1]} {wanted}"
    )


def _check_answer(walk: Walk, consumer: Hashable | None, param: Param, info: FunctionInfo) -> None:
    """Refuse a consumer whose T cannot hold what a resolver that may ask gives: the
    answer's schema (``S`` in ``Elicit[S]``) and the value it returns when it does
    not ask. An outcome consumer (``ElicitationResult[T]``, ``Accepted[T]``) is
    judged by its ``T``."""
    wanted = param.bare if param.outcome is None else accepted_data(param.bare)
    answer = info.asks if info.may_ask else NO_DEFAULT
    # With an unknown answer (``Sample | dict``: the core cannot tell what a Sample is
    # answered with) the other arm alone decides nothing, as the SDK accepts it.
    plain = NO_DEFAULT if info.may_ask and answer in (NO_DEFAULT, info.provides) else info.provides
    arms = [t for t in (plain, answer) if t is not NO_DEFAULT]
    # One related arm is enough, as for a resolver declaring a union.
    if not arms or may_hold(wanted, typing.Union[tuple(arms)]):  # noqa: UP007
        return
    want, short = type_name(wanted), getattr(info.fn, "__name__", None) or info.name
    gives: list[str] = []
    if plain is not NO_DEFAULT:
        gives.append(f"returns {type_name(plain)}" + (" when it does not ask" if arms[1:] else ""))
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
        f"parameter {param.name!r} of {name_of(walk, consumer)} expects {expects}, but its "
        f"resolver {info.name} {' and '.join(gives)}.\n"
        f"  path: {path(walk, consumer, param.name)}\n"
        f"  fix: annotate it `{param.name}: Annotated[{annotated}, Resolve({short})]`{change}"
    )


def _entered_instead(
    walk: Walk, consumer: Hashable | None, param: Param, info: FunctionInfo, entered: Any
) -> None:
    """The consumer wants the context manager itself; the provider injects what
    entering it gives."""
    cls, method = type_name(entered), "__aenter__" if info.kind.is_async else "__enter__"
    short = getattr(info.fn, "__name__", None) or info.name
    raise InvalidSignature(
        f"parameter {param.name!r} of {name_of(walk, consumer)} expects "
        f"{type_name(param.bare)}, "
        f"but its resolver {info.name} returns {cls}, a context manager: resolvent enters "
        f"it for the scope and injects what {method} gives, {type_name(info.provides)}.\n"
        f"  path: {path(walk, consumer, param.name)}\n"
        f"  fix: to inject the {cls} itself, not entered, annotate {short} `-> Any` "
        f"instead of `-> {cls}` (and register it with `provides={cls}` to find it by "
        f"type); to use what it enters, annotate it "
        f"`{param.name}: Annotated[{type_name(info.provides)}, Resolve({short})]`"
    )


# -- lifetimes: scopes, questions, plain `with` overrides --------------------------------


def check_lifetime(walk: Walk, node: Node, param: Param, child: Node) -> None:
    """Refuse a longer-lived value that depends on a shorter-lived one (a captive), and
    a resolver that must be APP-scoped (`LASTING`) and is not."""
    outer, inner = node.provider.scope, child.provider.scope
    if inner < Scope.APP:
        lasting = getattr(node.provider.fn, LASTING, None)
        if lasting is not None and param.name in lasting:
            _short_lived(walk, node, param, child, *lasting[param.name])
    if inner >= outer:
        return
    raise InvalidSignature(
        f"captive dependency: {node.name} ({outer!r}) depends on {child.name} ({inner!r}) "
        f"through parameter {param.name!r}.\n"
        f"  path: {path(walk, node.key, param.name)} -> {child.name}\n"
        f"  a {outer!r} value outlives every {inner.name} scope, so it would keep the first "
        f"{inner.name}'s {child.name} forever.\n"
        f"  fix: register {child.name} with scope={outer!r} or longer, or register "
        f"{node.name} with scope={inner!r}",
        path=(*names(walk, node.key), child.name),
        offending=1,
    )


def _short_lived(walk: Walk, node: Node, param: Param, child: Node, what: str, why: str) -> None:
    """Raise for *child*, which *node* needs for the whole APP scope, and is shorter-lived."""
    scope = child.provider.scope
    short = getattr(child.provider.fn, "__name__", None) or child.name
    unregistered = (
        " (as is every resolver used without registering it)" if scope is Scope.CALL else ""
    )
    raise InvalidSignature(
        f"{node.name} takes {what} from {child.name} through parameter {param.name!r}, "
        f"which is {scope!r}{unregistered}; it must be Scope.APP: {why}.\n"
        f"  path: {path(walk, node.key, param.name)} -> {child.name}\n"
        f"  fix: register it for the app's lifetime: "
        f"`container.provide({short}, scope=Scope.APP)`",
        path=(*names(walk, node.key), child.name),
        offending=1,
    )


def captive_source(walk: Walk, node: Node, param: Param, what: str) -> None:
    """Raise for an APP/SESSION value that takes *what*, which exists for one call only."""
    scope = node.provider.scope
    raise InvalidSignature(
        f"captive dependency: {node.name} ({scope!r}) takes {what} through parameter "
        f"{param.name!r}, but that only exists for one call.\n"
        f"  path: {path(walk, node.key, param.name)}\n"
        f"  fix: register {node.name} with scope=Scope.CALL, or move the use of "
        f"{param.name!r} into a CALL-scoped resolver that depends on it"
    )


def check_asks(node: Node) -> None:
    """Refuse an APP/SESSION resolver that may return a question."""
    info, scope = node.provider, node.provider.scope
    if scope > Scope.CALL and info.may_ask and info.provides is not NO_DEFAULT:
        returns = info.provides
        if returns is not Any and returns is not object and not isinstance(returns, typing.TypeVar):
            raise InvalidSignature(
                f"{node.name} is registered with scope={scope!r} but may return a question; "
                "only CALL-scoped resolvers may ask.\n"
                "  fix: move the question into a CALL-scoped resolver that depends on "
                f"{node.name}"
            )


def refuse_unclosable(walk: Walk, node: Node, taint: frozenset[int], plain: dict[int, str]) -> None:
    """Refuse an async APP/SESSION resource built from a plain ``with`` override (*plain*
    maps those blocks to how they were written): leaving the block could not await its
    close, so it would stay open until its scope closes."""
    provider, kind = node.provider, node.provider.kind
    entered = sorted(taint & plain.keys())
    if not entered or provider.scope is Scope.CALL or not (kind.is_resource and kind.is_async):
        return
    block = plain[entered[0]]
    raise ResolventError(
        f"{node.name} ({provider.scope!r}) is an async resource built from the replacement "
        f"of `with {block}:`, a plain `with` block: leaving it cannot await the resource's "
        f"close, so it would stay open until the {provider.scope.name} scope closes.\n"
        f"  path: {path(walk, node.key)}\n"
        f"  fix: `async with {block}:`; in pytest, enter it in an async fixture, or use the "
        "resolvent_override fixture in an anyio test (it closes the block asynchronously)"
    )


# -- cycles --------------------------------------------------------------------------------


def cycle(walk: Walk, stack: list[tuple[Hashable, int]], child: Hashable) -> InvalidSignature:
    """The error for a dependency cycle: the walk's *stack* reached *child* again."""
    keys = [key for key, _ in stack]
    start = keys.index(child)
    hops: list[str] = []
    for key, index in stack[start:]:
        param = walk.expand(key)[index - 1][0].name
        hops.append(f"{walk.nodes[key].name}({param}=...)")
    hops.append(walk.nodes[child].name)
    return InvalidSignature(
        f"dependency cycle: {' -> '.join(hops)}.\n"
        f"  path: {path(walk, stack[start][0])}\n"
        "  fix: break the cycle: one of these resolvers must not depend on the others "
        "(pass the value as a call argument, or split the resolver in two)",
        path=(
            *names(walk, stack[start][0]),
            *(walk.nodes[k].name for k, _ in stack[start + 1 :]),
            walk.nodes[child].name,
        ),
        offending=len(stack) - start,
    )
