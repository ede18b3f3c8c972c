"""Cold start: plans that share resolvers share their readings, and stay correct."""

import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

import resolvent._graph.registry as registry_module
from modes import MODES, make_container, run
from resolvent import Container, Elicit, Resolve, Scope, inline
from resolvent._reading.params import RESOLVE_MARKERS, register_resolve_marker


async def shared() -> int:
    return 1


async def middle(s: Annotated[int, Resolve(shared)]) -> int:
    return s + 1


def _handlers(n: int) -> list[Any]:
    out = []
    for i in range(n):

        async def handler(m: Annotated[int, Resolve(middle)], i: int = i) -> int:
            return m + i

        out.append(handler)
    return out


def test_a_resolver_used_by_many_plans_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Any] = []
    real = registry_module.read_function

    def counting(fn: Any) -> Any:
        read.append(fn)
        return real(fn)

    monkeypatch.setattr(registry_module, "read_function", counting)
    container = Container()
    for handler in _handlers(20):
        container.compile(handler)
    assert read.count(middle) == 1
    assert read.count(shared) == 1


async def test_marking_a_resolver_inline_later_is_honoured() -> None:
    def plain() -> int:
        return 2

    async def first(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    async def second(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    container = Container()
    assert not container.compile(first).steps[0].inline
    inline(plain)
    assert container.compile(second).steps[0].inline
    async with container:
        assert await container.run(second) == 2


async def test_a_plan_compiled_and_hot_before_an_inline_mark_follows_it() -> None:
    # Every container's plans compile again: a resolver marked `inline` runs on the
    # event loop from the next call on, also in a plan that was already hot.
    threads: list[str] = []

    def plain() -> int:
        threads.append(threading.current_thread().name)
        return 2

    async def handler(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    container, other = Container(), Container()
    async with container:
        for _ in range(5):  # past its interpreted first calls: generated code
            assert await container.run(handler) == 2
        assert other.compile(handler).steps[0].inline is False
        assert threading.current_thread().name not in threads  # a worker thread's
        inline(plain)
        threads.clear()
        assert await container.run(handler) == 2
        assert threads == [threading.current_thread().name]
        assert other.compile(handler).steps[0].inline is True


async def test_a_marker_registered_later_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    class OtherResolve:
        """Another library's marker, honoured only once registered."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn

    async def leaf() -> int:
        return 3

    async def uses_other(x: Annotated[int, OtherResolve(leaf)] = 0) -> int:
        return x

    async def first(v: Annotated[int, Resolve(uses_other)]) -> int:
        return v

    async def second(v: Annotated[int, Resolve(uses_other)]) -> int:
        return v

    container = Container()
    async with container:
        assert await container.run(first) == 0  # the unknown marker: the default
        monkeypatch.setitem(RESOLVE_MARKERS, OtherResolve, lambda m: Resolve(m.fn))
        del RESOLVE_MARKERS[OtherResolve]  # registered the public way, undone at the end
        register_resolve_marker(OtherResolve, lambda m: Resolve(m.fn))
        assert await container.run(second) == 3


# --- tiered execution: a plan's first calls are interpreted, then its code generated ---


async def _outcome(container: Container, handler: Any, **kwargs: Any) -> Any:
    """What a caller sees: the result, or the error's type, text, notes and cause."""
    try:
        return ("ok", await container.run(handler, **kwargs))
    except BaseException as exc:
        cause = exc.__cause__
        return (
            type(exc).__name__,
            str(exc),
            getattr(exc, "__notes__", None),
            None if cause is None else (type(cause).__name__, str(cause)),
        )


def _tiered() -> Any:
    """A graph with an APP value, a shared CALL value, an inline sync step and a call
    argument, whose middle resolver fails for ``user_id == "bad"``."""
    made: list[str] = []

    async def settings() -> str:
        made.append("settings")
        return "cfg"

    @inline
    def prefix(s: Annotated[str, Resolve(settings)]) -> str:
        return s + ":"

    async def user(user_id: str, p: Annotated[str, Resolve(prefix)]) -> str:
        made.append("user")
        if user_id == "bad":
            raise ValueError(f"no user {user_id}")
        return p + user_id

    async def handler(
        user_id: str,
        u: Annotated[str, Resolve(user)],
        again: Annotated[str, Resolve(user)],
        p: Annotated[str, Resolve(prefix)],
    ) -> str:
        return f"{u}|{again}|{p}"

    return settings, handler, made


async def test_first_calls_and_hot_calls_look_the_same() -> None:
    settings, handler, made = _tiered()
    container = Container()
    container.provide(settings, scope=Scope.APP)
    async with container:
        seen = [await _outcome(container, handler, user_id="u") for _ in range(4)]
        failed = [await _outcome(container, handler, user_id="bad") for _ in range(4)]
        missing = [await _outcome(container, handler) for _ in range(4)]
    assert seen == [("ok", "cfg:u|cfg:u|cfg:")] * 4
    assert failed[0][0] == "ValueError" and failed[0][2]  # noted with the resolver path
    assert failed == [failed[0]] * 4
    assert missing == [missing[0]] * 4
    assert made.count("settings") == 1  # APP: once, cold or hot
    assert made.count("user") == 8  # once per call, shared by both parameters


async def test_a_plan_turns_hot_and_run_starts_its_generated_code() -> None:
    from resolvent._container.launch import HOT_AFTER, is_cold

    settings, handler, _ = _tiered()
    container = Container()
    container.provide(settings, scope=Scope.APP)
    plan = container.compile(handler)
    assert is_cold(plan.run_fn)
    async with container:
        for _ in range(HOT_AFTER):
            await container.run(handler, user_id="u")
        assert is_cold(plan.run_fn)
        assert not plan._entry  # nothing generated yet
        await container.run(handler, user_id="u")
        # No cold layer left on the hot path: the generated entry, bound to the APP scope.
        assert container._ready[handler].__func__ is plan.entry_fn
        # Only what runs is generated: `run`'s own variant is left until a call needs it.
        assert is_cold(plan.run_fn)
        assert await container.run(handler, user_id="v") == "cfg:v|cfg:v|cfg:"


async def test_an_integrations_plan_is_interpreted_exactly_hot_after_times() -> None:
    # The run an integration starts with framework values (an MCP tool taking its
    # Context): its first `HOT_AFTER` calls are interpreted, the next one generates code.
    from resolvent._container.launch import HOT_AFTER, app_and_call, is_cold

    settings, handler, _ = _tiered()
    container = Container()
    container.provide(settings, scope=Scope.APP)
    plan = container.compile(handler)
    async with container:
        scopes = app_and_call(container._app)
        for _ in range(HOT_AFTER):
            assert is_cold(plan.run_fn)
            assert await plan.run_fn({"user_id": "u"}, {}, scopes, handler) == "cfg:u|cfg:u|cfg:"
        assert await plan.run_fn({"user_id": "v"}, {}, scopes, handler) == "cfg:v|cfg:v|cfg:"
        assert not is_cold(plan.run_fn)


async def test_a_call_scope_runs_the_generated_code_at_once() -> None:
    from resolvent._container.launch import is_cold

    settings, handler, _ = _tiered()
    container = Container()
    container.provide(settings, scope=Scope.APP)
    plan = container.compile(handler)
    async with container, container.call() as call:
        assert await call.run(handler, user_id="u") == "cfg:u|cfg:u|cfg:"
    assert not is_cold(plan.run_fn)


# --- a resolver's checked expansion is shared by the plans that use it ----------------


class Request:
    """A framework value type."""


async def test_shared_expansions_keep_what_each_handler_needs() -> None:
    from resolvent import InvalidSignature

    async def who(user_id: str) -> str:
        return user_id

    async def greeting(w: Annotated[str, Resolve(who)]) -> str:
        return f"hi {w}"

    async def with_arg(user_id: str, g: Annotated[str, Resolve(greeting)]) -> str:
        return g

    async def without_arg(g: Annotated[str, Resolve(greeting)]) -> str:
        return g

    async def by_request(r: Request) -> str:
        return type(r).__name__

    async def uses_request(x: Annotated[str, Resolve(by_request)]) -> str:
        return x

    async def first(x: Annotated[str, Resolve(uses_request)]) -> str:
        return x

    async def second(x: Annotated[str, Resolve(uses_request)]) -> str:
        return x

    container = Container(values=(Request,))
    async with container:
        assert await container.run(with_arg, user_id="u") == "hi u"
        # `who` reads the call argument: the next handler, which has none, is refused.
        with pytest.raises(InvalidSignature, match="user_id"):
            container.compile(without_arg)
        container.compile(first)
        assert container.compile(second).value_types == (Request,)
        async with container.call(values={Request: Request()}) as call:
            assert await call.run(second) == "Request"


async def test_a_new_provider_changes_what_later_plans_resolve() -> None:
    class Greeting(str):
        pass

    async def hello() -> Greeting:
        return Greeting("hello")

    async def shout(g: Annotated[Greeting, Resolve()]) -> str:
        return g.upper()

    async def first(s: Annotated[str, Resolve(shout)]) -> str:
        return s

    async def second(s: Annotated[str, Resolve(shout)]) -> str:
        return s

    container = Container()
    container.provide(hello)
    async with container:
        assert await container.run(first) == "HELLO"

        async def hi() -> Greeting:
            return Greeting("hi")

        container.provide(hi, provides=Greeting)  # now two offer Greeting: ambiguous
        from resolvent import InvalidSignature

        with pytest.raises(InvalidSignature, match="2 providers"):
            container.compile(second)


# --- a handler over an already compiled graph walks only its own resolvers ------------


def _shared_graph(size: int) -> list[Any]:
    """*size* resolvers, each depending on the two before it (a lattice whose every
    sub-graph is shared by the ones above it)."""
    made: list[Any] = []
    for i in range(size):
        below = made[-2:]
        if len(below) == 2:

            async def r(
                a: Annotated[int, Resolve(below[0])], b: Annotated[int, Resolve(below[1])]
            ) -> int:
                return a + b

        elif below:

            async def r(a: Annotated[int, Resolve(below[0])]) -> int:
                return a

        else:

            async def r() -> int:
                return 1

        r.__qualname__ = f"r{i}"
        made.append(r)
    return made


def _over_the_graph(made: list[Any]) -> tuple[Any, Any, Any]:
    """Over the graph *made*: a first handler that uses its top, a resolver of its own
    over the top two, and a second handler using that resolver and the graph again."""
    top, second = made[-1], made[-2]

    async def first(t: Annotated[int, Resolve(top)]) -> int:
        return t

    async def own(t: Annotated[int, Resolve(top)], s: Annotated[int, Resolve(second)]) -> int:
        return t + s

    async def handler(
        o: Annotated[int, Resolve(own)], s: Annotated[int, Resolve(second)], user_id: str
    ) -> int:
        return o + s

    return first, own, handler


def _counted_compile(
    monkeypatch: pytest.MonkeyPatch, container: Container, handler: Any
) -> tuple[list[Any], list[Any]]:
    """Compile *handler*; the resolvers its compile expanded (classified and checked
    parameter by parameter) and the functions it read."""
    import resolvent._graph.compiler as compiler_module

    expanded: list[Any] = []
    read: list[Any] = []
    real_expand = compiler_module._Compiler.expand
    real_read = registry_module.read_function

    def expand(self: Any, key: Any) -> Any:
        expanded.append(key)
        return real_expand(self, key)

    def reading(fn: Any) -> Any:
        read.append(fn)
        return real_read(fn)

    with monkeypatch.context() as patch:
        patch.setattr(compiler_module._Compiler, "expand", expand)
        patch.setattr(registry_module, "read_function", reading)
        patch.setattr(compiler_module, "read", reading)
        container.compile(handler)
    return expanded, read


@pytest.mark.parametrize("size", [10, 100])
def test_a_new_handler_costs_its_own_resolvers_not_the_shared_graph(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    made = _shared_graph(size)
    first, own, handler = _over_the_graph(made)

    container = Container()
    expanded, _ = _counted_compile(monkeypatch, container, first)
    assert len(expanded) == size  # the first plan walks the whole graph once
    expanded, read = _counted_compile(monkeypatch, container, handler)
    assert expanded == [own]  # its one new resolver; the shared graph is not walked again
    assert read == [handler, own]
    plan = container.compile(handler)
    assert [s.fn for s in plan.steps] == [*made, own]  # the plan has the whole graph


def test_a_new_handler_makes_steps_only_for_its_own_resolvers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan takes the steps earlier plans of its container made for the same
    resolvers: compiling a handler over an already compiled graph makes one step, for
    its one new resolver, whatever the size of the graph."""
    import resolvent._graph.steps as steps_module

    made = _shared_graph(100)
    first, own, handler = _over_the_graph(made)

    container = Container()
    before = container.compile(first)
    built: list[Any] = []
    real = steps_module.Step

    def counting(*args: Any, **kwargs: Any) -> Any:
        step = real(*args, **kwargs)
        built.append(step)
        return step

    monkeypatch.setattr(steps_module, "Step", counting)
    plan = container.compile(handler)
    assert [s.fn for s in built] == [own]
    assert [s.fn for s in plan.steps] == [*made, own]
    assert all(a is b for a, b in zip(plan.steps, before.steps, strict=False))
    # Each plan still reads its steps by index and names its own chain.
    assert plan.position(plan.steps[-1].index) == len(made)
    r98, r99, mine = plan.steps[-3:]
    assert plan.path_to(r98.index) == f"{plan.name}(o=...) -> {mine.name}(s=...) -> {r98.name}"
    assert before.path_to(r98.index) == f"{before.name}(t=...) -> {r99.name}(b=...) -> {r98.name}"


def _asker(tag: str) -> Any:
    """An asking resolver; every one made here has the same wire key base."""

    async def confirm() -> Elicit[Confirm]:
        return Elicit(f"confirm {tag}?", Confirm)

    return confirm


async def test_a_plan_has_the_same_wire_keys_whatever_was_compiled_before() -> None:
    """The wire keys of a plan's questions (what a later round answers) depend on the
    plan alone: the same in a fresh container as after hundreds of other plans that
    share its asking resolvers, each of which names the plan's own parameter."""
    ask_a, ask_b = _asker("a"), _asker("b")

    async def handler(
        x: Annotated[Confirm, Resolve(ask_a)], y: Annotated[Confirm, Resolve(ask_b)]
    ) -> str:
        return f"{x.ok} {y.ok}"

    async def questions(container: Container) -> dict[str, str]:
        from resolvent import InputRequired

        async with container:
            with pytest.raises(InputRequired) as info:
                async with container.call(rounds=True) as call:
                    await call.run(handler)
        return {key: repr(question) for key, question in info.value.questions.items()}

    def keys(container: Container) -> list[tuple[str, str]]:
        return [(s.wire_key, s.param) for s in container.compile(handler).steps]

    fresh = Container()
    expected = keys(fresh)
    base = expected[0][0]
    assert expected == [(base, "x"), (f"{base}#1", "y")]
    asked = await questions(fresh)
    assert list(asked) == [base, f"{base}#1"]
    assert "confirm a?" in asked[base] and "confirm b?" in asked[f"{base}#1"]

    later = Container()
    for i in range(300):
        # Other plans: each asker alone, the two the other way round, other parameters.
        alone = (ask_a, ask_b)[i % 2]

        async def other(
            z: Annotated[Confirm, Resolve(alone)], w: Annotated[Confirm, Resolve(ask_b)]
        ) -> None:
            return None

        async def swapped(
            w: Annotated[Confirm, Resolve(ask_b)], z: Annotated[Confirm, Resolve(ask_a)]
        ) -> None:
            return None

        later.compile(other)
        later.compile(swapped)
    assert keys(later) == expected
    assert await questions(later) == asked


def _chains() -> tuple[Any, Any, Any]:
    """Two handlers that reach one failing resolver by different chains."""

    async def leaf() -> int:
        return 1

    async def broken(x: Annotated[int, Resolve(leaf)]) -> int:
        raise LookupError(f"broken {x}")

    async def wrapper(b: Annotated[int, Resolve(broken)]) -> int:
        return b

    async def direct(p: Annotated[int, Resolve(broken)]) -> int:
        return p

    async def through(q: Annotated[int, Resolve(leaf)], w: Annotated[int, Resolve(wrapper)]) -> int:
        return q + w

    return direct, through, broken


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_shared_resolver_names_each_plans_own_chain(mode: str) -> None:
    direct, through, broken = _chains()
    container = make_container(mode)
    one, other = container.compile(direct), container.compile(through)
    shared = next(s for s in one.steps if s.fn is broken)
    assert any(s is shared for s in other.steps)  # the one step of both plans
    prefix = f"{_chains.__module__}.{_chains.__qualname__}.<locals>."
    expected = {
        direct: "direct(p=...) -> broken",
        through: "through(w=...) -> wrapper(b=...) -> broken",
    }
    async with container:
        for _ in range(3):  # cold (interpreted) calls, then generated code
            for handler in (through, direct):
                with pytest.raises(LookupError) as info:
                    await run(container, handler, mode)
                (note,) = info.value.__notes__
                assert note.replace(prefix, "").endswith(f"resolving {expected[handler]}")


class Confirm(BaseModel):
    ok: bool


def test_every_handler_over_a_shared_mistake_is_refused_with_the_same_message() -> None:
    """Sub-graphs are kept for later plans only once walked and checked: a mistake
    below a shared resolver is found again, with the same message, for each handler."""
    from resolvent import InvalidSignature

    async def leaf() -> int:
        return 1

    async def by_arg(user_id: str, x: Annotated[int, Resolve(leaf)]) -> int:
        return x

    async def asks() -> Elicit[Confirm] | int:  # may ask: an APP resolver may not
        return 1

    async def call_value() -> int:
        return 2

    async def captive(x: Annotated[int, Resolve(call_value)]) -> int:
        return x

    class Missing(int):
        pass

    async def unknown(m: Annotated[Missing, Resolve()]) -> int:
        return m

    container = Container()
    container.provide(asks, scope=Scope.APP)
    container.provide(captive, scope=Scope.APP)
    mistakes = [by_arg, asks, captive, unknown]
    for bad in mistakes:

        async def middle(
            good: Annotated[int, Resolve(leaf)], b: Annotated[int, Resolve(bad)]
        ) -> int:
            return good + b

        messages = []
        for _ in range(3):

            async def handler(
                g: Annotated[int, Resolve(leaf)], m: Annotated[int, Resolve(middle)]
            ) -> int:
                return g + m

            with pytest.raises(InvalidSignature) as caught:
                container.compile(handler)
            messages.append(str(caught.value))
        assert messages == [messages[0]] * 3, bad
        assert bad.__name__ in messages[0] or "Missing" in messages[0]


async def test_marking_a_resolver_below_a_shared_one_inline_later_is_honoured() -> None:
    def plain() -> int:
        return 2

    async def middle(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    async def first(m: Annotated[int, Resolve(middle)]) -> int:
        return m

    async def second(m: Annotated[int, Resolve(middle)]) -> int:
        return m

    container = Container()
    assert [s.inline for s in container.compile(first).steps] == [False, True]
    inline(plain)
    assert [s.inline for s in container.compile(second).steps] == [True, True]
    async with container:
        assert await container.run(second) == 2


async def test_an_outcome_of_a_resolver_that_never_asks_is_the_same_cold_and_hot() -> None:
    """A consumer may take a plain resolver's value as an accepted outcome: its first
    (interpreted) calls hand over the same outcome as its generated code, to a resolver
    and to the handler."""
    from resolvent import Accepted

    async def plain() -> Confirm:
        return Confirm(ok=True)

    async def middle(c: Annotated[Accepted[Confirm], Resolve(plain)]) -> bool:
        return isinstance(c, Accepted) and c.data == Confirm(ok=True)

    async def handler(
        m: Annotated[bool, Resolve(middle)], c: Annotated[Accepted[Confirm], Resolve(plain)]
    ) -> tuple[bool, bool]:
        return m, isinstance(c, Accepted) and c.data == Confirm(ok=True)

    container = Container()
    async with container:
        seen = [await container.run(handler) for _ in range(4)]
    assert seen == [(True, True)] * 4


async def test_first_calls_give_each_parameter_its_own_value_however_written() -> None:
    """A cold plan's first calls pass some resolvers their values by position: each
    parameter still gets its own, cold and hot, whatever the order, kind or defaults of
    the resolver's parameters."""
    from resolvent._container.launch import HOT_AFTER, is_cold

    async def a() -> int:
        return 1

    async def b() -> int:
        return 2

    async def c() -> int:
        return 3

    A, B, C = (Annotated[int, Resolve(f)] for f in (a, b, c))

    async def ordered(x: A, y: B, z: C) -> str:
        return f"x{x} y{y} z{z}"

    async def backwards(z: C, y: B, x: A) -> str:
        return f"x{x} y{y} z{z}"

    async def keyword_only(x: A, *, z: C, y: B) -> str:
        return f"x{x} y{y} z{z}"

    async def skips(x: A, kept: int = 7, *, y: B) -> str:
        return f"x{x} y{y} kept{kept}"

    async def gap(x: A, kept: int = 7, y: B = 0) -> str:  # type: ignore[assignment]
        return f"x{x} y{y} kept{kept}"

    async def with_argument(x: A, user_id: str) -> str:
        return f"x{x} {user_id}"

    @inline
    def plain(y: B, x: A) -> str:
        return f"x{x} y{y}"

    async def handler(
        user_id: str,
        o: Annotated[str, Resolve(ordered)],
        w: Annotated[str, Resolve(backwards)],
        k: Annotated[str, Resolve(keyword_only)],
        s: Annotated[str, Resolve(skips)],
        g: Annotated[str, Resolve(gap)],
        u: Annotated[str, Resolve(with_argument)],
        p: Annotated[str, Resolve(plain)],
    ) -> list[str]:
        return [o, w, k, s, g, u, p]

    expected = ["x1 y2 z3"] * 3 + ["x1 y2 kept7"] * 2 + ["x1 u", "x1 y2"]
    container = Container()
    assert is_cold(container.compile(handler).run_fn)  # its first calls are interpreted
    async with container:
        seen = [await container.run(handler, user_id="u") for _ in range(HOT_AFTER + 2)]
    assert seen == [expected] * (HOT_AFTER + 2)
