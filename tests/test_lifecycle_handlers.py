"""Handlers as users write them: a blocking ``def`` handler runs in a worker thread in every
mode (as the MCP SDK runs a sync tool), ``@inline`` keeps a cheap one on the event loop, a
caller's deadline is not held up by a handler's thread, and a call scope used after its
``async with`` block refuses instead of opening resources nobody closes."""

import threading
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, client, text
from resolvent import Call, Container, Resolve, ResolventError, Scope, inline
from resolvent.mcp import inject
from snapshot import assert_snapshot
from test_lifecycle_calls import Gate

HANDLER_MODES = ["generated", "interpreter", "concurrent", "call_timeout", "session"]


class LoopProbe:
    """Lets a blocking handler check that the event loop keeps running meanwhile."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.answered = threading.Event()

    def loop_answers(self) -> bool:
        """Called in the handler: True if a task on the event loop answered meanwhile."""
        self.started.set()
        return self.answered.wait(3)

    async def answer(self) -> None:
        """A task on the event loop: answers once the handler has started."""
        await anyio.to_thread.run_sync(self.started.wait, 10)
        self.answered.set()


def _container(mode: str) -> Container:
    return Container(
        concurrent=mode == "concurrent", call_timeout=60 if mode == "call_timeout" else None
    )


async def _run(container: Container, handler: Any, mode: str, **kwargs: Any) -> Any:
    if mode == "interpreter":  # a multi-round call is interpreted step by step
        async with container.call(rounds=True) as call:
            return await call.run(handler, **kwargs)
    if mode == "session":
        async with container.session() as session:
            return await session.run(handler, **kwargs)
    return await container.run(handler, **kwargs)


def _connection(log: list[str]) -> Any:
    async def connection() -> AsyncIterator[str]:
        log.append("open connection")
        try:
            yield "conn"
        finally:
            log.append("close connection")

    return connection


async def _expire_once_entered(deadline: anyio.CancelScope, gate: Gate) -> None:
    """Moves the caller's deadline to now once the handler's thread is blocked in the gate."""
    assert await anyio.to_thread.run_sync(gate.entered.wait, 5)
    deadline.deadline = anyio.current_time()


_LOG: list[str] = []


def _log() -> list[str]:
    return _LOG


def environment() -> str:  # a plain sync resolver: a worker thread of its own
    return "prod"


@pytest.mark.parametrize("mode", HANDLER_MODES)
async def test_a_blocking_sync_handler_runs_in_a_worker_thread_and_leaves_the_loop_free(
    mode: str,
) -> None:
    probe = LoopProbe()
    log: list[str] = []
    connection = _connection(log)

    def export(
        user_id: str,
        conn: Annotated[str, Resolve(connection)],
        env: Annotated[str, Resolve(environment)],
    ) -> str:
        # Blocking work (a file, a sync client): other requests go on meanwhile.
        assert probe.loop_answers(), "the handler blocked the event loop"
        log.append("exported")
        return f"{user_id} via {conn} in {env}"

    container = _container(mode)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(probe.answer)
            assert await _run(container, export, mode, user_id="u1") == "u1 via conn in prod"
    assert log == ["open connection", "exported", "close connection"]
    assert container.compile(export).describe().splitlines()[-3].endswith("export (thread)")


async def test_a_sync_handler_after_sync_resolvers_shares_their_thread_hop() -> None:
    threads: dict[str, int] = {}
    failure = LookupError("no such order")

    def order_id(user_id: str) -> int:
        threads["order_id"] = threading.get_ident()
        return len(user_id)

    def order(oid: Annotated[int, Resolve(order_id)]) -> str:
        threads["order"] = threading.get_ident()
        if oid > 5:
            raise ValueError("order id out of range")
        return f"order {oid}"

    def invoice(user_id: str, o: Annotated[str, Resolve(order)]) -> str:
        threads["invoice"] = threading.get_ident()
        if user_id == "ghost":
            raise failure
        return f"invoice for {o}"

    container = Container()
    assert await container.run(invoice, user_id="ada") == "invoice for order 3"
    assert len(set(threads.values())) == 1  # one hop: resolvers and handler together
    assert threading.get_ident() not in threads.values()
    run_source = container.compile(invoice).source().partition("async def resolve(")[0]
    hops = run_source.count("await in_thread(") + run_source.count("await to_thread(")
    assert hops == 1
    # The handler's own error comes back as itself, not blamed on a resolver.
    with pytest.raises(LookupError) as raised:
        await container.run(invoice, user_id="ghost")
    assert raised.value is failure
    assert not getattr(failure, "__notes__", None)
    # A resolver's error still names the resolver.
    with pytest.raises(ValueError) as bad:
        await container.run(invoice, user_id="too long")
    assert "raised by" in bad.value.__notes__[0] and ".order (CALL)" in bad.value.__notes__[0]


@pytest.mark.parametrize("mode", HANDLER_MODES)
async def test_an_inline_sync_handler_and_resolver_run_on_the_event_loop(mode: str) -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    @inline
    def region() -> str:  # unregistered, marked: no thread hop either
        seen["region"] = threading.get_ident()
        return "eu"

    @inline
    def health(
        r: Annotated[str, Resolve(region)], env: Annotated[str, Resolve(environment)]
    ) -> str:
        seen["health"] = threading.get_ident()
        return f"ok in {r}/{env}"

    container = _container(mode)
    assert await _run(container, health, mode) == "ok in eu/prod"
    assert seen == {"region": loop_thread, "health": loop_thread}
    described = container.compile(health).describe()
    assert "region  CALL    function\n" in described
    assert "(thread)" in described  # environment
    assert described.splitlines()[-3].endswith("health")


async def stream_rows(log: Annotated[list[str], Resolve(_log)]) -> AsyncIterator[str]:
    log.append("set up")  # never reached: run refuses before
    yield "row"


def count_rows(log: Annotated[list[str], Resolve(_log)]) -> Iterator[int]:
    log.append("set up")
    yield 1


@pytest.mark.parametrize("mode", HANDLER_MODES)
async def test_a_generator_handler_is_refused_not_run(mode: str) -> None:
    """Calling a generator function only makes a generator: run would return it with its
    set-up and teardown never run, and its resources closed before anyone iterates."""
    container = _container(mode)
    async with container:
        for handler in (stream_rows, count_rows):
            for _ in range(2):  # the first call, and one with its plan compiled
                with pytest.raises(ResolventError, match="generator") as refused:
                    await _run(container, handler, mode)
                assert _LOG == []
            if handler is stream_rows and mode != "interpreter":
                runner = "session.run" if mode == "session" else "container.run"
                message = str(refused.value).replace(runner, "RUNNER")
                assert_snapshot("run_generator_handler", message)


@pytest.mark.parametrize("mode", HANDLER_MODES)
async def test_a_callers_deadline_abandons_a_slow_sync_handler_and_closes_its_resources(
    mode: str,
) -> None:
    gate = Gate()
    log: list[str] = []
    connection = _connection(log)

    def export(
        conn: Annotated[str, Resolve(connection)], env: Annotated[str, Resolve(environment)]
    ) -> str:  # in generated plans: called in the hop of `environment`
        gate.block()
        log.append(f"late export on {conn}")
        gate.finished.set()
        return "exported"

    container = _container(mode)
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        # The caller's own bound, e.g. a request deadline. It passes while the handler blocks
        # (not at a fixed time, which a loaded machine could reach before the handler starts).
        with anyio.fail_after(60) as deadline:
            async with anyio.create_task_group() as group:
                group.start_soon(_expire_once_entered, deadline, gate)
                await _run(container, export, mode)
    # The call ended on time while the thread was still blocked, its resources closed.
    assert not gate.finished.is_set()
    assert log == ["open connection", "close connection"]
    assert await gate.let_go()
    assert log[-1] == "late export on conn"  # ran on after the call; its result dropped


async def test_call_timeout_bounds_the_resolution_of_a_sync_handler() -> None:
    gate = Gate()
    ran: list[str] = []

    def lookup() -> str:
        gate.block()
        gate.finished.set()
        return "late"

    def handler(found: Annotated[str, Resolve(lookup)]) -> str:
        ran.append(found)
        return found

    container = Container(call_timeout=0.2)
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await container.run(handler)
    assert not gate.finished.is_set()
    await gate.let_go()
    assert ran == []


# -- a call scope used outside its block ---------------------------------------------------


async def test_a_call_used_after_its_block_refuses_instead_of_opening_resources() -> None:
    log: list[str] = []
    connection = _connection(log)

    async def report(conn: Annotated[str, Resolve(connection)]) -> str:
        return f"report on {conn}"

    container = Container()
    async with container.call() as call:
        assert await call.run(report) == "report on conn"
    with pytest.raises(ResolventError) as closed:
        await call.run(report)
    assert_snapshot("call_used_after_close", str(closed.value))
    with pytest.raises(ResolventError) as closed_resolve:
        await call.resolve(container.compile(report))
    assert "call.resolve(" in str(closed_resolve.value)
    assert log == ["open connection", "close connection"]  # nothing opened after the block

    async with container.session() as session:
        stray = session.call()  # never entered
        with pytest.raises(ResolventError) as never:
            await stray.resolve(report)
        assert_snapshot("call_never_entered", str(never.value))
        async with session.call() as call:
            pass
        with pytest.raises(ResolventError) as again:
            async with call:
                pass
        assert_snapshot("call_entered_twice", str(again.value))
    assert log == ["open connection", "close connection"]


@pytest.mark.parametrize("mode", ["generated", "concurrent", "call_timeout"])
async def test_a_call_that_closes_while_a_task_still_resolves_closes_what_opens_late(
    mode: str,
) -> None:
    log: list[str] = []
    resolving = anyio.Event()
    go_on = anyio.Event()
    errors: list[BaseException] = []

    async def session_token() -> AsyncIterator[str]:
        log.append("open token")
        try:
            yield "token"
        finally:
            log.append("close token")

    async def profile(token: Annotated[str, Resolve(session_token)]) -> str:
        resolving.set()
        await go_on.wait()
        return f"profile for {token}"

    async def cursor(p: Annotated[str, Resolve(profile)]) -> AsyncIterator[str]:
        log.append("open cursor")
        try:
            yield "cursor"
        finally:
            log.append("close cursor")

    async def handler(c: Annotated[str, Resolve(cursor)]) -> str:
        log.append("handler ran")
        return c

    async def background(call: Call) -> None:
        try:
            await call.run(handler)
        except ResolventError as error:
            errors.append(error)

    container = _container(mode)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:  # outlives the call: the mistake
            async with container.call() as call:
                group.start_soon(background, call)
                await resolving.wait()
            go_on.set()
    assert log == ["open token", "close token", "open cursor", "close cursor"]
    assert len(errors) == 1
    assert_snapshot(
        "call_closed_while_resolving",
        str(errors[0]).replace(
            "test_a_call_that_closes_while_a_task_still_resolves_closes_what_opens_late.<locals>.",
            "",
        ),
    )


LATE_MODES = ["generated", "concurrent", "call_timeout", "call_concurrent"]


def _late_call(container: Container, mode: str) -> Call:
    return container.call(concurrent=True) if mode == "call_concurrent" else container.call()


def _late_container(mode: str) -> Container:
    return _container("generated" if mode == "call_concurrent" else mode)


def _reports(failure: BaseException, teardown_error: BaseException) -> int:
    """How often *failure* reports *teardown_error*: as itself or in a note."""
    notes = getattr(failure, "__notes__", [])
    return (failure is teardown_error) + sum(repr(teardown_error) in note for note in notes)


@pytest.mark.parametrize("mode", LATE_MODES)
async def test_a_resource_that_opens_as_its_call_closes_is_closed_once(mode: str) -> None:
    # Its set-up ends, then the call's block ends before the resolution that opened it
    # wakes up: the call closes it (it was listed), and that resolution must not close it
    # again (its teardown error would be reported twice).
    teardowns: list[str] = []
    teardown_error = RuntimeError("cursor teardown failed")
    opened = anyio.Event()

    async def cursor() -> AsyncIterator[str]:
        with anyio.CancelScope():  # held across its yield: set up in a task of its own
            opened.set()  # no checkpoint from here to the end of its set-up
            yield "cursor"
            teardowns.append("close cursor")
            raise teardown_error

    async def handler(c: Annotated[str, Resolve(cursor)]) -> str:
        return c

    container = _late_container(mode)
    # Which of the two woken tasks runs first is the event loop's choice (trio picks at
    # random): try until the block's end comes first, as asyncio always lets it.
    for _attempt in range(40):
        teardowns.clear()
        opened = anyio.Event()
        late: list[BaseException] = []
        failures: list[BaseException] = []

        async def background(call: Call, late: list[BaseException]) -> None:
            try:
                await call.run(handler)
            except ResolventError as error:
                late.append(error)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:  # outlives the call: the mistake
                try:
                    async with _late_call(container, mode) as call:
                        group.start_soon(background, call, late)
                        await opened.wait()
                except RuntimeError as error:
                    failures.append(error)
        assert teardowns == ["close cursor"]
        reports = sum(_reports(failure, teardown_error) for failure in failures + late)
        assert reports == 1, (failures, late)
        if late:
            break
    assert len(late) == 1
    assert failures == [teardown_error]  # the call closed it, and reports its teardown
    assert_snapshot(
        "call_closed_as_resource_opened",
        str(late[0]).replace(
            "test_a_resource_that_opens_as_its_call_closes_is_closed_once.<locals>.", ""
        ),
    )


@pytest.mark.parametrize("mode", LATE_MODES)
async def test_a_resource_whose_setup_outlives_its_call_is_closed_once(mode: str) -> None:
    # The call's block ends while the set-up runs: nothing lists it in the closed call, so
    # its resolution closes it, once, and reports the teardown error with its own.
    teardowns: list[str] = []
    teardown_error = RuntimeError("cursor teardown failed")
    setting_up = anyio.Event()
    go_on = anyio.Event()
    late: list[BaseException] = []

    async def cursor() -> AsyncIterator[str]:
        with anyio.CancelScope():  # held across its yield: set up in a task of its own
            setting_up.set()
            await go_on.wait()
            yield "cursor"
            teardowns.append("close cursor")
            raise teardown_error

    async def handler(c: Annotated[str, Resolve(cursor)]) -> str:
        return c

    async def background(call: Call) -> None:
        try:
            await call.run(handler)
        except ResolventError as error:
            late.append(error)

    async def finish_setup() -> None:  # runs once the block has begun to end
        go_on.set()

    container = _late_container(mode)
    with anyio.fail_after(5):
        # The task group outlives the call: the mistake.
        async with anyio.create_task_group() as group, _late_call(container, mode) as call:
            group.start_soon(background, call)
            await setting_up.wait()
            # A call holding its resources in a task group waits for their set-up as its
            # block ends: let the set-up end then, not before the block does.
            group.start_soon(finish_setup)
    assert teardowns == ["close cursor"]
    assert len(late) == 1
    assert _reports(late[0], teardown_error) == 1
    assert str(late[0]).startswith(
        "test_lifecycle_handlers.test_a_resource_whose_setup_outlives_its_call_is_closed_once."
        "<locals>.cursor opened "
        "after its call scope had closed"
    )
    assert "it was closed again at once" in str(late[0])


@pytest.mark.parametrize("mode", LATE_MODES)
async def test_a_cancelled_resolution_closes_what_opens_after_its_call(mode: str) -> None:
    # The block ends mid-set-up, then the resolution is cancelled; the set-up (shielded)
    # opens all the same. The closed call does not list it, so the resolution closes it.
    teardowns: list[str] = []
    setting_up = anyio.Event()
    go_on = anyio.Event()
    scopes: list[anyio.CancelScope] = []

    async def cursor() -> AsyncIterator[str]:
        with anyio.CancelScope(shield=True):
            setting_up.set()
            await go_on.wait()
        yield "cursor"
        teardowns.append("close cursor")

    async def handler(c: Annotated[str, Resolve(cursor)]) -> str:
        return c

    async def background(call: Call) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await call.run(handler)

    async def cancel_then_finish_setup() -> None:  # runs once the block has begun to end
        scopes[0].cancel()
        await anyio.lowlevel.checkpoint()
        go_on.set()

    container = _late_container(mode)
    with anyio.fail_after(5):
        # The task group outlives the call: the mistake.
        async with anyio.create_task_group() as group, _late_call(container, mode) as call:
            group.start_soon(background, call)
            await setting_up.wait()
            group.start_soon(cancel_then_finish_setup)
    assert teardowns == ["close cursor"]


async def test_a_session_used_after_its_block_refuses() -> None:
    async def visits() -> AsyncIterator[list[str]]:
        yield []

    async def visit(seen: Annotated[list[str], Resolve(visits)]) -> int:
        seen.append("visit")
        return len(seen)

    container = Container()
    container.provide(visits, scope=Scope.SESSION)
    async with container, container.session() as session:
        assert await session.run(visit) == 1
    with pytest.raises(ResolventError) as closed:
        await session.run(visit)
    assert_snapshot("session_used_after_close", str(closed.value))
    with pytest.raises(ResolventError, match=r"^session.call\(\) on a session that is already"):
        session.call()
    with pytest.raises(ResolventError, match=r"^async with session on a session that is already"):
        async with session:
            pass


async def test_an_inline_fake_in_an_override_runs_on_the_loop() -> None:
    loop_thread = threading.get_ident()

    def rates() -> dict[str, float]:  # the real one blocks on a slow service
        return {"EUR": 1.1}

    @inline
    def fixed_rates() -> dict[str, float]:
        return {"EUR": 1.0, "thread": float(threading.get_ident() == loop_thread)}

    async def convert(amount: float, r: Annotated[dict[str, float], Resolve(rates)]) -> float:
        assert r["thread"] == 1.0, "the inline fake ran in a worker thread"
        return amount * r["EUR"]

    container = Container()
    with container.override(rates, fixed_rates):
        assert await container.run(convert, amount=2.0) == 2.0


def test_inline_on_an_async_function_or_an_injected_tool_says_where_it_belongs() -> None:
    container = Container()

    async def lookup() -> str:
        return "found"

    with pytest.raises(TypeError) as on_async:
        inline(lookup)
    assert_snapshot(
        "inline_on_async",
        str(on_async.value).replace(
            "test_inline_on_an_async_function_or_an_injected_tool_says_where_it_belongs.<locals>.",
            "",
        ),
    )

    def find(found: Annotated[str, Resolve(lookup)]) -> str:
        return found

    with pytest.raises(TypeError, match="put @inline below @inject"):
        inline(inject(container)(find))


# -- through MCP -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_sync_tools_run_in_a_thread_unless_inline(mode: str) -> None:
    probe = LoopProbe()
    loop_thread = threading.get_ident()
    log: list[str] = []
    connection = _connection(log)
    container = Container()
    server = MCPServer("sync tools", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    def export(user_id: str, conn: Annotated[str, Resolve(connection)]) -> str:
        assert probe.loop_answers(), "the tool blocked the event loop"
        return f"{user_id} via {conn}"

    @server.tool()
    @inject(container)
    def environment_name(env: Annotated[str, Resolve(environment)]) -> str:  # no resources
        assert probe.loop_answers(), "the tool blocked the event loop"
        return env

    @server.tool()
    @inject(container)
    @inline
    def same_thread(env: Annotated[str, Resolve(environment)]) -> bool:
        return threading.get_ident() == loop_thread

    async with client(server, mode) as c:
        for tool, args, expected in [
            ("export", {"user_id": "u1"}, "u1 via conn"),
            ("environment_name", {}, "prod"),
        ]:
            probe = LoopProbe()
            with anyio.fail_after(10):
                async with anyio.create_task_group() as group:
                    group.start_soon(probe.answer)
                    result = await c.call_tool(tool, args)
            assert not result.is_error, text(result)
            assert text(result) == expected
        result = await c.call_tool("same_thread", {})
        assert text(result) == "true"
    assert log == ["open connection", "close connection"]


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_sync_tool_call_times_out_on_a_slow_sync_resolver(mode: str) -> None:
    gate = Gate()
    ran: list[str] = []

    def lookup() -> str:
        gate.block()
        gate.finished.set()
        return "late"

    container = Container(call_timeout=0.2)
    server = MCPServer("deadline", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    def find(found: Annotated[str, Resolve(lookup)]) -> str:
        ran.append(found)
        return found

    async with client(server, mode) as c:
        with anyio.fail_after(5):
            result = await c.call_tool("find", {})
        assert result.is_error and not gate.finished.is_set()
        assert "late" not in text(result)
    await gate.let_go()
    assert ran == []


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_client_giving_up_on_a_slow_sync_tool_frees_its_call_at_once(mode: str) -> None:
    gate = Gate()
    closed = anyio.Event()

    async def connection() -> AsyncIterator[str]:
        try:
            yield "conn"
        finally:
            closed.set()

    container = Container()
    server = MCPServer("slow export", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    def export(conn: Annotated[str, Resolve(connection)]) -> str:
        gate.block()
        gate.finished.set()
        return f"exported over {conn}"

    async with client(server, mode) as c:
        with anyio.move_on_after(60) as gives_up:  # the client gives up: the request is cancelled
            async with anyio.create_task_group() as group:
                group.start_soon(_expire_once_entered, gives_up, gate)
                await c.call_tool("export", {})
        with anyio.fail_after(5):
            await closed.wait()  # the server did not wait for the thread
        assert not gate.finished.is_set()
        await gate.let_go()


# -- through Starlette and FastAPI ---------------------------------------------------------


async def test_starlette_and_fastapi_sync_endpoints_run_in_a_thread_unless_inline() -> None:
    import httpx
    from fastapi import FastAPI
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from resolvent.starlette import inject as inject_web

    loop_thread = threading.get_ident()
    container = Container()

    def where() -> str:
        return "loop" if threading.get_ident() == loop_thread else "thread"

    @inject_web(container)
    def page(request: Request, env: Annotated[str, Resolve(environment)]) -> PlainTextResponse:
        return PlainTextResponse(f"{where()} {env}")

    @inject_web(container)
    @inline
    def quick_page(request: Request) -> PlainTextResponse:
        return PlainTextResponse(where())

    api = FastAPI()

    @api.get("/export")
    @inject_web(container)
    def export(user: str, env: Annotated[str, Resolve(environment)]) -> str:
        return f"{where()} {user} {env}"

    @api.get("/health")
    @inject_web(container)
    @inline
    def health(env: Annotated[str, Resolve(environment)]) -> str:
        return where()

    site = Starlette(routes=[Route("/page", page), Route("/quick", quick_page)])
    for app, path, expected in [
        (site, "/page", "thread prod"),
        (site, "/quick", "loop"),
        (api, "/export?user=ada", '"thread ada prod"'),
        (api, "/health", '"loop"'),
    ]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as web:
            assert (await web.get(path)).text == expected, path
