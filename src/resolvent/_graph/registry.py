"""Providers keyed by function identity and by provided type, and what compiling derives from
them once for every plan (readings, checked expansions). It never walks a graph or runs one."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Hashable
from typing import Any

from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import is_inline
from .._reading.params import Param
from .._reading.signature import FunctionInfo, read_function
from .._vocabulary.frozen import Frozen, put
from .._vocabulary.markers import ReadingEpoch
from .._vocabulary.scopes import Scope
from .plan import Input

__all__ = (
    "IMPLICIT_SCOPE",
    "LASTING",
    "UNSPLICEABLE",
    "Closure",
    "Expansion",
    "Piece",
    "Provider",
    "Registry",
    "resolver_key",
)

IMPLICIT_SCOPE = "__resolvent_scope__"
LASTING = "__resolvent_lasting__"
"""On a resolver: ``{parameter: (what it takes, why it must last)}`` for parameters whose
resolver must be APP-scoped (a `State`'s store); the compiler refuses a shorter one."""


def resolver_key(fn: Any) -> Hashable:
    """The memo key of a resolver: its identity.

    A bound method is re-created on every attribute access, so it is keyed by its
    function and its ``self``: ``svc.load`` referenced twice is one resolver, and two
    instances never collide. Plans keep the objects alive, so identities stay unique.
    """
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        func = getattr(fn, "__func__", None) or getattr(fn, "__name__", None)
        return ("method", func, id(owner))
    if isinstance(fn, types.FunctionType | type):
        return fn
    return ("object", id(fn))


_READING: tuple[str, ...] = vars(FunctionInfo)["__slots__"]
_OWN = ("scope", "inline")


class Provider(FunctionInfo, compare=True):
    """A registered (or implicitly used) resolver and how it lives: its reading (the
    fields of `FunctionInfo`, held by the provider itself: one object per resolver, not
    two), its scope, and whether it runs inline. Immutable, compared by all three."""

    __slots__ = _OWN  # beside the reading's own (`_READING`)

    scope: Scope
    inline: bool

    def __init__(self, info: FunctionInfo, scope: Scope, inline: bool) -> None:
        for name in _READING:
            put(self, name, getattr(info, name))
        put(self, "scope", scope)
        put(self, "inline", inline)


class Expansion:
    """A resolver's checked expansion, shared by the plans that use it (`Registry.expansions`;
    the compiler makes it in `expand`)."""

    __slots__ = ("closure", "edges", "inputs", "key", "piece", "provider", "step")
    key: Hashable
    provider: Provider  # the reading it was checked for: valid while the key has it
    edges: tuple[tuple[Param, Hashable], ...]  # each child's reading: its own expansion's
    inputs: tuple[Input | tuple[Param, Hashable], ...]
    closure: Closure | None  # its whole sub-graph, once walked (the compiler's `close`)
    piece: Piece | None
    """Its whole sub-graph's steps, once every one is built (`subgraphs.piece_of`), or
    `UNSPLICEABLE` when they cannot be taken whole (a step may ask, or runs in a thread)."""
    step: Any
    """The resolver's step, once a plan without overrides built it: every later plan
    without overrides that reaches this expansion takes it as it is; a plan whose node
    has the same reading and other inputs copies it (`build_steps`), and
    tells from it whether it is a CALL resource or runs in a worker thread."""

    def __init__(
        self,
        key: Hashable,
        provider: Provider,
        edges: tuple[tuple[Param, Hashable], ...],
        inputs: tuple[Input | tuple[Param, Hashable], ...],
    ) -> None:
        self.key = key
        self.provider = provider
        self.edges = edges
        self.inputs = inputs
        self.closure = None
        self.piece = None
        self.step = None

    @property
    def values(self) -> tuple[Any, ...]:
        """The framework value types it takes, in order: its inputs tell them (none
        when its inputs are its edges)."""
        inputs = self.inputs
        if inputs is self.edges:
            return ()
        return tuple(
            item.value_type for item in inputs if isinstance(item, Input) and item.source == "value"
        )


class Closure(Frozen):
    """A resolver's whole sub-graph as a walk from it alone meets it: what a later plan
    that reaches the resolver adds, without walking it again (the compiler's `splice`).

    Each plan rebuilds only what depends on where the sub-graph sits in it (step
    indexes, the first consumer of each node); nothing here is re-read or re-checked.
    """

    __slots__ = ("creations", "post", "values")
    creations: tuple[Any, ...]
    """The compiler's node for every resolver below this one, in the order the walk
    creates them, with its first consumer, edges and inputs as a walk from this resolver
    alone gives them. Shared by every plan the sub-graph is spliced into, so never
    changed (the compiler's `splice`)."""
    post: tuple[Expansion, ...]
    """The expansion of every node below the resolver (its key, provider, edges and
    inputs), in the walk's post-order; the resolver's own comes after them."""
    values: tuple[Any, ...]
    """The framework value types the sub-graph takes, in order of first use."""

    def __init__(
        self, creations: tuple[Any, ...], post: tuple[Expansion, ...], values: tuple[Any, ...]
    ) -> None:
        put(self, "creations", creations)
        put(self, "post", post)
        put(self, "values", values)


class Piece(Frozen):
    """A resolver's whole sub-graph as a plan holds it: the steps, in the walk's
    post-order with the resolver's own last, and what a plan derives from them (its
    scopes, whether a CALL step is a resource, the framework value types). A plan whose
    handler reaches only such resolvers is their pieces joined (`steps.join_pieces`):
    nothing in them is walked, checked or built again. Valid while `Registry.piece_epoch`
    is *epoch*."""

    __slots__ = ("call_resources", "epoch", "scopes", "steps", "values")
    steps: tuple[Any, ...]
    scopes: frozenset[Scope]
    call_resources: bool
    values: tuple[Any, ...]
    epoch: int

    def __init__(
        self,
        steps: tuple[Any, ...],
        scopes: frozenset[Scope],
        call_resources: bool,
        values: tuple[Any, ...],
        epoch: int,
    ) -> None:
        put(self, "steps", steps)
        put(self, "scopes", scopes)
        put(self, "call_resources", call_resources)
        put(self, "values", values)
        put(self, "epoch", epoch)


UNSPLICEABLE = Piece((), frozenset(), False, (), -1)
"""The piece of a sub-graph whose steps a plan cannot take whole: one may ask (each plan
has its own copy, with its wire key) or runs in a worker thread (the plan is sorted)."""


def read(fn: Callable[..., Any]) -> FunctionInfo:
    """`read_function`, uncached (a handler's own reading, a replacement's)."""
    return read_function(fn)


_MAX_READINGS = 4096
"""Readings of unregistered resolvers a registry keeps. Bounded, as the plan cache is:
an application's resolvers fit many times over, and a program that makes resolvers on
the fly (lambdas, partials) does not keep each one alive."""


_MAX_SLOTS = 8192
"""Keys given a slot a registry keeps (bounded, as the plan cache is)."""


class Registry:
    """The container's providers, findable by function and by the type they provide."""

    def __init__(self) -> None:
        self.by_key: dict[Hashable, Provider] = {}
        self.by_type: dict[Any, list[Provider]] = {}
        # Unregistered resolvers, key -> provider: every plan that uses a resolver
        # shares its one reading, so compiling a handler reads only the resolvers no
        # plan used before. An entry holds its function, so the key (an identity) stays
        # its own. All were read under `_readings_epoch`'s marker classes.
        # Oldest first: the bound lets go of the earliest readings (a plain dict: an
        # OrderedDict, kept in use order, costs about 100 bytes more per entry, and
        # reordering a plain one on every hit grows it).
        self._readings: dict[Hashable, Provider] = {}
        self._readings_epoch = ReadingEpoch.now
        # key -> a resolver's checked expansion (`Expansion`); cleared with
        # the container's plans whenever a registration changes.
        self.expansions: dict[Hashable, Expansion] = {}
        self._expansions_epoch = ReadingEpoch.now
        # key -> its slot: the `Step.index` of the resolver's steps in every plan, so a
        # step holds nothing of where it sits in a plan and plans share it (below). Never
        # reused: a number, once given, names one key for the registry's life.
        self.slots: dict[Hashable, int] = {}
        self._next_slot = 0
        # Moves on when an expansion is replaced by another of the same key (its
        # reading was made again): every `Piece` made before may hold its old step.
        self.piece_epoch = 0
        # id(param) -> (param, expansion, input): a handler's parameter (a shared `Param`
        # record) whose resolver's whole sub-graph a plan took as a `Piece`, after
        # checking the parameter against it. Valid while *expansion* is the one
        # `expansions` holds for its resolver: the check read only the parameter and that
        # expansion's provider, so its answer is the same. Whatever makes another (a
        # registration, an `inline` mark, a bound) empties both (`forget_expansions`),
        # but a reading made again, which moves `piece_epoch` on: so an entry holds
        # while its expansion's piece is of the current epoch.
        self.root_edges: dict[int, tuple[Param, Expansion, Input]] = {}

    def add(
        self,
        fn: Callable[..., Any],
        *,
        scope: Scope,
        provides: Any = None,
        inline: bool = False,
    ) -> Provider:
        """Register *fn*; what one function shows is validated now."""
        if not isinstance(scope, Scope):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"scope must be a resolvent.Scope, not {scope!r}\n  fix: pass "
                "scope=Scope.APP, Scope.SESSION or Scope.CALL"
            )
        info = read(fn)
        info.needs_return()  # found by type, checked, classified: a provider's is needed
        provider = Provider(info, scope, inline or is_inline(fn))
        key = resolver_key(fn)
        old = self.by_key.get(key)
        if old is not None:
            for offered in self.by_type.values():
                if old in offered:
                    offered.remove(old)
        self.by_key[key] = provider
        offered_type = provides if provides is not None else info.provides
        if (
            offered_type is not NO_DEFAULT
            and offered_type is not None
            and offered_type is not inspect.Parameter.empty
        ):
            self.by_type.setdefault(offered_type, []).append(provider)
        return provider

    def shared_expansions(self) -> dict[Hashable, Expansion]:
        """`expansions`, emptied first if a marker class was registered or a function
        marked `inline` since they were made: each holds the readings of the resolvers
        below it, which a later plan would otherwise take as they were."""
        epoch = ReadingEpoch.now
        if epoch != self._expansions_epoch:
            self._expansions_epoch = epoch
            self.forget_expansions()
        return self.expansions

    def forget_expansions(self) -> None:
        """Empty `expansions`, and `root_edges` with them; every `Piece` made is stale."""
        self.expansions.clear()
        self.root_edges.clear()
        self.piece_epoch += 1

    def slot_table(self) -> dict[Hashable, int]:
        """`slots`, emptied (and with it `expansions`, whose steps' inputs name slots)
        first if it grew past its bound: called before a plan is built, never during."""
        if len(self.slots) >= _MAX_SLOTS:
            self.slots.clear()
            self.forget_expansions()
        return self.slots

    def new_slot(self, key: Hashable) -> int:
        """Give *key* the next slot."""
        slot = self.slots[key] = self._next_slot
        self._next_slot = slot + 1
        return slot

    def get(self, fn: Callable[..., Any]) -> Provider | None:
        return self.by_key.get(resolver_key(fn))

    def implicit(self, fn: Callable[..., Any], key: Hashable = None) -> Provider:
        """The provider for an unregistered resolver: CALL-scoped, inline if marked.

        resolvent's own built-in providers (the default state store) carry their scope
        in ``__resolvent_scope__``, so they need no registration in each container.
        *key* is ``resolver_key(fn)``, if the caller has it already.
        """
        if key is None:
            key = resolver_key(fn)
        found = self.by_key.get(key)
        if found is not None:
            return found
        inline = is_inline(fn)
        scope = getattr(fn, IMPLICIT_SCOPE, Scope.CALL)
        readings = self._readings
        epoch = ReadingEpoch.now
        if epoch != self._readings_epoch:  # a marker class was registered: read again
            readings.clear()
            self._readings_epoch = epoch
        cached = readings.get(key)
        if cached is not None and cached.inline == inline and cached.scope is scope:
            return cached
        provider = Provider(read_function(fn), scope, inline)
        if len(readings) >= _MAX_READINGS:
            del readings[next(iter(readings))]
        readings[key] = provider
        return provider

    def for_type(self, tp: Any) -> list[Provider]:
        return list(self.by_type.get(tp, ()))
