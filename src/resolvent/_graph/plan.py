"""The execution plan as data (steps, inputs). It never imports what runs a plan: the code
comes from the `PlanCode` the plan is built with. Its renderings (text, Mermaid, Graphviz)
are `render`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._vocabulary.frozen import Frozen, making, put
from .._vocabulary.questions import OutcomeFamily
from .._vocabulary.scopes import Scope
from .overlap import Branches

__all__ = (
    "Input",
    "Plan",
    "PlanCode",
    "Step",
    "direct_shape",
    "keep_shared",
    "new_plan",
    "replaced",
)


class Input(Frozen, compare=True):
    """Where one parameter's value comes from.

    *source* is ``"step"`` (the value of the step whose `Step.index` is *step*), ``"arg"``
    (the call argument *arg*, else *default*) or ``"value"`` (the framework value of type
    *value_type*).
    """

    __slots__ = ("arg", "default", "name", "outcome", "source", "step", "value_type")
    name: str
    source: str
    step: int
    arg: str
    default: Any
    value_type: Any
    outcome: OutcomeFamily | None

    def __init__(
        self,
        name: str,
        source: str,
        step: int = -1,
        arg: str = "",
        default: Any = NO_DEFAULT,
        value_type: Any = None,
        outcome: OutcomeFamily | None = None,
    ) -> None:
        put(self, "name", name)
        put(self, "source", source)
        put(self, "step", step)
        put(self, "arg", arg)
        put(self, "default", default)
        put(self, "value_type", value_type)
        put(self, "outcome", outcome)


class Step(Frozen):
    """One resolver in the plan, with everything needed to run it.

    A step holds nothing about where it sits in a plan, so the plans of one container
    share the step of a resolver: *index* is the resolver's slot, a number the container
    gives it once (unique in any plan, not its position; see `Plan.position`), and the
    chain that reaches it is the plan's (`Plan.parent`). *wire_key* and *param* are the
    plan's own on a step that may ask (its questions carry them); a step that never asks
    has no wire key (``""``), and its *param* is that of the plan that made it.
    """

    __slots__ = (
        "awaits",
        "fn",
        "index",
        "inline",
        "inputs",
        "key",
        "kind",
        "may_ask",
        "name",
        "param",
        "positional",
        "scope",
    )
    index: int
    fn: Callable[..., Any]
    name: str
    key: Hashable
    scope: Scope
    kind: Kind
    inline: bool
    may_ask: bool
    inputs: tuple[Input, ...]
    param: str
    awaits: bool
    """Calling *fn* returns an awaitable; for a resource, the context manager is the
    awaited result (``async def f() -> httpx.AsyncClient``)."""
    positional: tuple[int, ...] | None
    """For an async CALL step, the slots of its inputs when *fn* takes them as its first
    positional parameters, in order (each a step's value as it is): a cold plan's first
    calls pass them so."""

    def __init__(
        self,
        index: int,
        fn: Callable[..., Any],
        name: str,
        key: Hashable,
        scope: Scope,
        kind: Kind,
        inline: bool,
        may_ask: bool,
        inputs: tuple[Input, ...],
        param: str,
        awaits: bool = False,
        positional: tuple[int, ...] | None = None,
    ) -> None:
        put(self, "index", index)
        put(self, "fn", fn)
        put(self, "name", name)
        put(self, "key", key)
        put(self, "scope", scope)
        put(self, "kind", kind)
        put(self, "inline", inline)
        put(self, "may_ask", may_ask)
        put(self, "inputs", inputs)
        put(self, "param", param)
        put(self, "awaits", awaits)
        put(self, "positional", positional)

    if TYPE_CHECKING:  # a field of `AskingStep` only (see below)

        @property
        def wire_key(self) -> str: ...

    @property
    def threaded(self) -> bool:
        """True for a sync function that runs in a worker thread."""
        return self.kind is Kind.SYNC and not self.inline


# Only a step that may ask has a wire key: the others keep no field for it and read the
# class's "". One that may ask is an `AskingStep`, whose slot shadows it.
type.__setattr__(Step, "wire_key", "")


class AskingStep(Step):
    """A step that may ask: its wire key beside the fields (made by the compiler)."""

    __slots__ = ("wire_key",)  # pyright: ignore[reportIncompatibleMethodOverride]

    def __init__(self, wire_key: str, *fields: Any) -> None:
        super().__init__(*fields)
        put(self, "wire_key", wire_key)


if TYPE_CHECKING:

    class PlanCode(Protocol):
        """The code that runs plans: implemented by the launcher (`resolvent._container.launch`;
        a traced plan's, by tracing), and passed to `Plan` by whoever builds one, so a plan
        (data) never imports what runs it."""

        def is_cold(self, run: Callable[..., Any]) -> bool:
            """Whether *run* is a cold plan's interpreting ``run_fn`` (no code generated yet)."""
            ...

        def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
            """*plan*'s generated *variant*, compiled now: ``"run"``, ``"resolve"``,
            ``"direct"`` or ``"kept"`` (None if a CALL resource of *plan* needs a call
            scope), or ``"entry"``."""
            ...

        def source(self, plan: Plan, variant: str) -> str:
            """The Python source of *plan*'s generated *variant* (``"run"`` or ``"resolve"``)."""
            ...

        def run_in(self, call: Any, plan: Plan, kwargs: dict[str, Any]) -> Awaitable[Any]:
            """`Call.run` of *plan* when *call* resolves it itself (the interpreter, a
            deadline, concurrent branches, another resolution in flight): *call*'s own
            `run_here`, or for a traced plan the same in the call's span. Chosen with the
            plan's code, so `Call.run` asks nothing else of the plan."""
            ...


class Plan(Frozen):
    """A function's dependency graph, compiled once into steps in topological order.

    Get one from `Container.compile`. A plan is immutable and holds everything needed to
    resolve a call; nothing on the call path reads annotations again.

    Attributes:
        fn: the function the plan was compiled for.
        name: its qualified name.
        steps: the resolvers, dependencies first.
        inputs: where each injected parameter of *fn* comes from.
        arguments: the names of *fn*'s parameters the caller supplies.
        code: what generates the plan's code (its `PlanCode`).
    """

    __slots__ = (
        "_branches",
        "_direct",
        "_entry",
        "_generated",
        "_on_hot",
        "_parents",
        "_slots",
        "arguments",
        "code",
        "fn",
        "fn_is_async",
        "fn_threaded",
        "generation",
        "inputs",
        "name",
        "needs_call",
        "overrides",
        "run_fn",
        "scopes",
        "steps",
        "value_types",
    )  # fmt: skip
    _hidden = frozenset(
        ("run_fn", "code", "_generated", "overrides", "_direct", "_entry", "_on_hot", "_slots",
         "_parents", "_branches"),
    )  # fmt: skip
    fn: Callable[..., Any]
    name: str
    steps: tuple[Step, ...]
    inputs: tuple[Input, ...]
    arguments: tuple[str, ...]
    value_types: tuple[Any, ...]
    scopes: frozenset[Scope]
    needs_call: bool
    generation: int
    fn_is_async: bool
    run_fn: Callable[..., Any]
    code: PlanCode
    overrides: Any
    fn_threaded: bool  # a sync fn not marked `inline`: its body runs in a thread
    # What a plan makes on first use is set once in its field (`_made`), which starts
    # as None (not made): a plan that never needs it keeps no object for it.
    _generated: Callable[..., Coroutine[Any, Any, dict[str, Any]]] | None
    """The generated ``resolve`` function."""
    _direct: tuple[Callable[..., Any] | None] | None
    """The generated ``direct`` function (None if it needs a call scope), in a 1-tuple."""
    _entry: Callable[..., Any] | None
    _on_hot: tuple[Callable[[Callable[..., Any]], None], ...] | None
    """What to call once the plan's code is generated (`when_hot`)."""
    _slots: tuple[dict[int, Step], dict[int, int]] | None
    """(index -> step, index -> position)."""
    _parents: dict[int, tuple[int, str]] | None
    """index -> (parent's index, parameter): made for an error's path."""
    _branches: Branches[Step] | None

    def _made(self, name: str, value: Any) -> Any:
        put(self, name, value)  # a cache of the plan's own: set once
        return value

    def when_hot(self, callback: Callable[[Callable[..., Any]], None]) -> None:
        """Call *callback(run_fn)* once the plan's code is generated (see `heat`)."""
        self._made("_on_hot", (*(self._on_hot or ()), callback))

    def heat(self) -> Callable[..., Any]:
        """The generated ``run`` function; made now if the plan started cold.

        A plan of a cold shape (see `cold_runner`) is compiled with an interpreting
        ``run_fn``: its code is generated here, on the call that finds it hot, and
        replaces ``run_fn`` (and whatever the container cached of it).
        """
        run = self.run_fn
        if not self.code.is_cold(run):
            return run
        function = self.code.function(self, "run")
        assert function is not None
        put(self, "run_fn", function)  # the one field that changes
        hooks = self._on_hot
        if hooks:
            self._made("_on_hot", None)
            for hook in hooks:
                hook(function)
        return function

    @property
    def resolve_fn(self) -> Callable[..., Coroutine[Any, Any, dict[str, Any]]]:
        """The generated ``resolve`` function, compiled the first time it is needed."""
        function = self._generated
        if function is None:
            function = self.code.function(self, "resolve")
            assert function is not None
            self._made("_generated", function)
        return function

    @property
    def direct_fn(self) -> Callable[..., Any] | None:
        """The generated ``direct`` function (``run`` that sets up and tears down the CALL
        resources itself), or None if a resource needs a call scope; made on first use."""
        direct = self._direct
        if direct is None:
            direct = self._made("_direct", (self.code.function(self, "direct"),))
        return direct[0]

    @property
    def entry_fn(self) -> Callable[..., Any]:
        """The generated ``entry`` function (what `Container.run` starts: ``run``, or
        ``direct`` with CALL resources, for a call with no call scope, framework values or
        session); made on first use. Only for a plan with no step of a scope between APP
        and CALL, no framework value, and CALL resources that need no call scope."""
        function = self._entry
        if function is None:
            function = self.code.function(self, "entry")
            assert function is not None
            self._made("_entry", function)
        return function

    @property
    def overlaps(self) -> bool:
        """Whether two steps could ever run at once in concurrent mode (`overlaps`)."""
        return self.branches.overlaps

    @property
    def branches(self) -> Branches[Step]:
        """The steps as concurrent branches follow them; made on first use."""
        shape = self._branches
        return self._made("_branches", Branches(self.steps)) if shape is None else shape

    def _maps(self) -> tuple[dict[int, Step], dict[int, int]]:
        maps = self._slots
        if maps is None:
            steps = self.steps
            maps = self._made(
                "_slots",
                ({s.index: s for s in steps}, {s.index: i for i, s in enumerate(steps)}),
            )
        return maps

    def step_at(self, index: int) -> Step:
        """The step whose `Step.index` is *index*."""
        return self._maps()[0][index]

    def has(self, step: Step) -> bool:
        """Whether *step* is one of this plan's steps."""
        return self._maps()[0].get(step.index) is step

    def position(self, index: int) -> int:
        """Where the step whose `Step.index` is *index* comes in `steps`."""
        return self._maps()[1][index]

    def parent(self, index: int) -> tuple[int, str]:
        """Which step first needs step *index* in this plan, and for which parameter:
        ``(its index, parameter)``, index -1 for the plan's function. The compiler's walk
        again, from the plan's inputs: made on the first call (an error's path)."""
        parents = self._parents
        if parents is None:
            from .render import parents_of  # an error's: loaded by the first one

            parents = self._made("_parents", parents_of(self, self._maps()[0]))
        return parents[index]

    def path_to(self, index: int) -> str:
        """How the plan reaches step *index* (a `Step.index`):
        ``root.param -> resolver.param -> ...``."""
        from .render import path_to

        return path_to(self, index)

    def source(self) -> str:
        """The Python source generated for this plan: what runs once the plan is hot
        (`Container.run` interprets a plan's first calls, then generates this code)."""
        return "\n".join(self.code.source(self, v) for v in ("run", "resolve"))

    def describe(self) -> str:
        """A readable text view: steps in order with scope, kind and sources."""
        from .render import describe  # loaded by the first rendering, not at import

        return describe(self)

    def to_mermaid(self) -> str:
        """The plan as a Mermaid flowchart; scopes are coloured, questions marked."""
        from .render import to_mermaid

        return to_mermaid(self)

    def to_dot(self) -> str:
        """The plan as a Graphviz DOT digraph; scopes are coloured, questions marked."""
        from .render import to_dot

        return to_dot(self)


def new_plan(
    *,
    fn: Callable[..., Any],
    name: str,
    steps: tuple[Step, ...],
    inputs: tuple[Input, ...],
    arguments: tuple[str, ...],
    value_types: tuple[Any, ...],
    scopes: frozenset[Scope],
    needs_call: bool,
    generation: int,
    fn_is_async: bool,
    run_fn: Callable[..., Any],
    code: PlanCode,
    overrides: Any = None,
    fn_threaded: bool = False,
) -> Plan:
    """A new plan (`Plan`'s fields; its caches start empty): made in a `making` twin, by
    plain assignment (a `put` costs ten of those), then a plan."""
    self = _new(_Making)
    self.fn = fn
    self.name = name
    self.steps = steps
    self.inputs = inputs
    self.arguments = arguments
    self.value_types = value_types
    self.scopes = scopes
    self.needs_call = needs_call
    self.generation = generation
    self.fn_is_async = fn_is_async
    self.run_fn = run_fn
    self.code = code
    self.overrides = overrides
    self.fn_threaded = fn_threaded
    # Its caches (`Plan._made`), none made yet: the plan's own, set here as it is made.
    self._generated = self._direct = self._entry = self._on_hot = None  # pyright: ignore[reportPrivateUsage]
    self._slots = self._parents = self._branches = None  # pyright: ignore[reportPrivateUsage]
    self.__class__ = Plan
    return self


_Making = making(Plan)  # what `new_plan` makes one in
_new = object.__new__


def direct_shape(steps: tuple[Step, ...]) -> bool:
    """True if generated code can run *steps* without a call scope: every CALL resource
    is set up and torn down in the caller's task (async, or sync run inline), and no step
    is of a scope between APP and CALL, which only a scope object opens."""
    return all(
        s.kind is Kind.ASYNC_GENERATOR or s.kind is Kind.ASYNC_CONTEXT_MANAGER or s.inline
        for s in steps
        if s.scope is Scope.CALL and s.kind.is_resource
    ) and all(s.scope is Scope.CALL or s.scope is Scope.APP for s in steps)


K = TypeVar("K")
V = TypeVar("V")

SHARED_LIMIT = 4096
"""Entries a table of values shared between plans keeps: bounded, as the plan cache is."""


def keep_shared(table: dict[K, V], key: K, value: V) -> V:
    """Keep *value* in *table* under *key*, for later plans to take instead of making an
    equal copy (the caller looked *key* up and did not find it); a full table is emptied
    first. Returns *value*."""
    if len(table) >= SHARED_LIMIT:
        table.clear()
    table[key] = value
    return value


def replaced(plan: Plan, **changes: Any) -> Plan:
    """*plan* with *changes* to the fields `new_plan` takes; its caches start empty."""
    given = {name: getattr(plan, name) for name in Plan.__slots__ if name[0] != "_"}
    return new_plan(**{**given, **changes})
