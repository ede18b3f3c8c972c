"""One call scope, many uses: every CALL value is made once per call scope, whatever
runs in it (several functions one after another, several tasks at once), and its
resources keep their promises (teardown in order, every finally in full), in every
execution mode and on both backends."""

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES as MCP_MODES
from mcp_helpers import client as mcp_client
from modes import MODES, make_container, run
from resolvent import Call, Container, Resolve
from resolvent.mcp import inject


def open_call(container: Container, mode: str) -> Call:
    """A call scope as *mode* says ("interpreter": a multi-round call)."""
    return container.call(rounds=mode == "interpreter")


# -- several functions, one after another, in one call ---------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_resolver_shared_by_several_functions_runs_once_per_call(mode: str) -> None:
    container = make_container(mode)
    events: list[str] = []

    async def user() -> str:
        events.append("user")
        return "ada"

    async def tx() -> AsyncIterator[str]:
        events.append("tx open")
        yield "tx"
        events.append("tx commit")

    async def first(u: Annotated[str, Resolve(user)]) -> str:
        return f"first {u}"

    async def second(u: Annotated[str, Resolve(user)], t: Annotated[str, Resolve(tx)]) -> str:
        return f"second {u} {t}"

    async def third(t: Annotated[str, Resolve(tx)], u: Annotated[str, Resolve(user)]) -> str:
        return f"third {t} {u}"

    async def fourth(u: Annotated[str, Resolve(user)]) -> str:
        return f"fourth {u}"

    for _ in range(2):  # each call scope makes its own values, once
        events.clear()
        async with open_call(container, mode) as call:
            assert await call.run(first) == "first ada"
            assert await call.run(second) == "second ada tx"
            assert await call.resolve(third) == {"t": "tx", "u": "ada"}
            assert await call.run(fourth) == "fourth ada"
            assert await call.run(third) == "third tx ada"
            assert events == ["user", "tx open"]
        assert events == ["user", "tx open", "tx commit"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_shared_resolver_runs_once_on_a_concurrent_call(mode: str) -> None:
    """`container.call(concurrent=True)` on any container: branches of several plans."""
    container = make_container(mode)
    made: list[str] = []

    async def user() -> str:
        made.append("user")
        await anyio.sleep(0)
        return "ada"

    async def perms(u: Annotated[str, Resolve(user)]) -> str:
        made.append("perms")
        return f"{u}:rw"

    async def a(u: Annotated[str, Resolve(user)], p: Annotated[str, Resolve(perms)]) -> str:
        return f"{u} {p}"

    async def b(p: Annotated[str, Resolve(perms)]) -> str:
        return p

    async with container.call(concurrent=True, rounds=mode == "interpreter") as call:
        assert await call.run(a) == "ada ada:rw"
        assert await call.run(b) == "ada:rw"
        assert await call.run(a) == "ada ada:rw"
    assert made == ["user", "perms"]


# -- several tasks, one call: each value made once, by the first to ask ----------------


@pytest.mark.parametrize("mode", MODES)
async def test_tasks_of_one_call_share_its_values(mode: str) -> None:
    container = make_container(mode)
    made: list[str] = []

    async def user() -> str:
        made.append("user")
        await anyio.lowlevel.checkpoint()
        return "ada"

    async def tx() -> AsyncIterator[str]:
        made.append("tx")
        await anyio.lowlevel.checkpoint()
        yield "tx"
        made.append("commit")

    async def audit(u: Annotated[str, Resolve(user)]) -> str:
        made.append("audit")
        return f"audit {u}"

    async def handler(u: Annotated[str, Resolve(user)], t: Annotated[str, Resolve(tx)]) -> str:
        return f"{u} {t}"

    async def other(a: Annotated[str, Resolve(audit)], t: Annotated[str, Resolve(tx)]) -> str:
        return f"{a} {t}"

    got: list[object] = []

    async def use(call: Call, n: int) -> None:
        if n % 3 == 0:
            got.append(await call.run(handler))
        elif n % 3 == 1:
            got.append(await call.resolve(other))
        else:
            got.append(await call.run(other))

    for _ in range(2):  # and again in a new call scope
        made.clear()
        got.clear()
        async with open_call(container, mode) as call, anyio.create_task_group() as group:
            for n in range(6):
                group.start_soon(use, call, n)
        assert sorted(made) == ["audit", "commit", "tx", "user"]
        assert made[-1] == "commit"
        assert got.count("ada tx") == 2
        assert got.count("audit ada tx") == 2
        assert got.count({"a": "audit ada", "t": "tx"}) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_task_waits_only_for_the_values_it_needs(mode: str) -> None:
    """While one task is still resolving, another that needs other values (and ones
    the first has made) goes on: here it is what lets the first one finish."""
    container = make_container(mode)
    made: list[str] = []
    first_waits = anyio.Event()
    go_on = anyio.Event()

    async def user() -> str:
        made.append("user")
        return "ada"

    async def slow(u: Annotated[str, Resolve(user)]) -> str:
        first_waits.set()
        await go_on.wait()
        return f"slow {u}"

    async def other() -> str:
        made.append("other")
        return "other"

    async def first(a: Annotated[str, Resolve(slow)]) -> str:
        return a

    async def second(b: Annotated[str, Resolve(other)]) -> str:
        go_on.set()  # the first one is still making `slow`
        return b

    got: dict[str, str] = {}

    async def run_first(call: Call) -> None:
        got["first"] = await call.run(first)

    async with open_call(container, mode) as call, anyio.create_task_group() as group:
        group.start_soon(run_first, call)
        await first_waits.wait()
        got["second"] = await call.run(second)
    assert got == {"first": "slow ada", "second": "other"}
    assert sorted(made) == ["other", "user"]


@pytest.mark.parametrize("mode", MODES)
async def test_tasks_waiting_for_a_value_get_its_failure_and_it_runs_once(mode: str) -> None:
    container = make_container(mode)
    tries: list[str] = []
    gate = anyio.Event()

    async def user() -> str:
        tries.append("user")
        await gate.wait()
        raise LookupError("no such user")

    async def handler(u: Annotated[str, Resolve(user)]) -> str:  # pragma: no cover
        return u

    failures: list[BaseException] = []

    async def use(call: Call) -> None:
        try:
            await call.run(handler)
        except LookupError as exc:
            failures.append(exc)

    async with open_call(container, mode) as call:
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(use, call)
            await anyio.wait_all_tasks_blocked()  # all three are in, one makes `user`
            gate.set()
        assert tries == ["user"]
        assert [str(f) for f in failures] == ["no such user"] * 3
        # The next use in the same call tries again.
        gate.set()
        with pytest.raises(LookupError):
            await call.run(handler)
        assert tries == ["user", "user"]


# -- resources that hold a cancel scope, resolved from child tasks or under a deadline --


@pytest.mark.parametrize("mode", MODES)
async def test_a_resource_holding_a_deadline_works_from_the_tasks_of_a_call(mode: str) -> None:
    """Tasks of a task group inside the call block run `call.run`; the transaction
    holds a deadline across its `yield` and commits after it, before its connection
    closes."""
    container = make_container(mode)
    events: list[str] = []

    async def conn() -> AsyncIterator[str]:
        events.append("connect")
        yield "conn"
        events.append("disconnect")

    async def tx(c: Annotated[str, Resolve(conn)]) -> AsyncIterator[str]:
        events.append("begin")
        with anyio.fail_after(30):
            yield f"tx on {c}"
        events.append("commit")

    async def handler(t: Annotated[str, Resolve(tx)]) -> str:
        await anyio.lowlevel.checkpoint()
        return t

    results: list[str] = []

    async def one(call: Call) -> None:
        results.append(await call.run(handler))

    async with (
        container,
        open_call(container, mode) as call,
        anyio.create_task_group() as group,
    ):
        for _ in range(3):
            group.start_soon(one, call)
    assert results == ["tx on conn"] * 3
    assert events == ["connect", "begin", "commit", "disconnect"]  # one of each, in order


@pytest.mark.parametrize("mode", MODES)
async def test_a_resource_with_its_own_task_group_resolves_under_the_callers_deadline(
    mode: str,
) -> None:
    """`call.resolve` under the caller's own `fail_after`: the resource keeps its task
    group open after that deadline's block has ended, and closes it at the call's end."""
    container = make_container(mode)
    events: list[str] = []

    async def ticker() -> AsyncIterator[str]:
        async def background() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                events.append("background stopped")

        async with anyio.create_task_group() as group:
            group.start_soon(background)
            try:
                yield "ticking"
            finally:
                events.append("ticker closing")
                group.cancel_scope.cancel()

    async def tx(t: Annotated[str, Resolve(ticker)]) -> AsyncIterator[str]:
        yield "tx"  # set up after the ticker, in every mode: closed before it
        events.append("commit")

    async def handler(
        t: Annotated[str, Resolve(ticker)], x: Annotated[str, Resolve(tx)]
    ) -> str:  # pragma: no cover - resolved only
        return t + x

    async with container, open_call(container, mode) as call:
        with anyio.fail_after(30):
            injected = await call.resolve(handler)
        assert injected == {"t": "ticking", "x": "tx"}
        await anyio.lowlevel.checkpoint()  # the block goes on after the deadline's
        events.append("body done")
    assert events == ["body done", "commit", "ticker closing", "background stopped"]


# -- a cancelled call runs every finally in full ---------------------------------------


@pytest.mark.parametrize("explicit", [False, True], ids=["run", "async-with-call"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_call_runs_the_whole_finally_of_a_resource_with_a_task_group(
    mode: str, explicit: bool
) -> None:
    """The client leaves while the handler runs: the resource's background task keeps
    running until its own teardown stops it, and its finally runs in full, checkpoints
    included."""
    container = make_container(mode)
    events: list[str] = []
    started = anyio.Event()

    async def feed() -> AsyncIterator[str]:
        async def background() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                events.append("background stopped")

        async with anyio.create_task_group() as group:
            group.start_soon(background)
            try:
                yield "feed"
            finally:
                events.append("finally")
                await anyio.sleep(0)
                events.append("after a checkpoint")
                await anyio.lowlevel.checkpoint()
                events.append("finally done")
                group.cancel_scope.cancel()

    async def handler(f: Annotated[str, Resolve(feed)]) -> str:
        started.set()
        await anyio.sleep_forever()
        return f  # pragma: no cover

    async def client() -> None:
        if explicit:
            async with open_call(container, mode) as call:
                await call.run(handler)
        else:
            await run(container, handler, mode)

    async with container:
        with anyio.CancelScope() as leaving:
            async with anyio.create_task_group() as group:
                group.start_soon(client)
                await started.wait()
                leaving.cancel()
    assert leaving.cancelled_caught
    assert events == ["finally", "after a checkpoint", "finally done", "background stopped"]


_CTRL_C_SCRIPT = """
import _thread, signal, threading, time
from collections.abc import AsyncIterator
from typing import Annotated
import trio
from resolvent import Container, Resolve

container = Container()
started = threading.Event()
steps = []


async def blocking() -> AsyncIterator[int]:
    started.set()
    for step in range(500):  # a set-up that blocks the event loop (up to 5 s)
        time.sleep(0.01)
        steps.append(step)
    yield 1


async def handler(r: Annotated[int, Resolve(blocking)]) -> int:
    return r


def interrupt() -> None:
    started.wait()
    _thread.interrupt_main()


# As from a terminal: started in the background by a shell without job control, this
# process would ignore SIGINT, and Ctrl-C (interrupt_main) would do nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)
threading.Thread(target=interrupt, daemon=True).start()
try:
    trio.run(container.run, handler)
except KeyboardInterrupt:
    print("interrupted", len(steps) < 500)
"""


def test_ctrl_c_interrupts_the_setup_of_a_call_resource_in_its_own_task_on_trio() -> None:
    """A CALL resource's first setup runs in a holder task (see `hold`); on trio that
    task is not shielded from Ctrl-C, as the call's own task is not."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "interrupted True", done.stdout + done.stderr


@pytest.mark.parametrize("protocol", MCP_MODES)
async def test_an_mcp_tool_call_the_client_leaves_runs_the_whole_finally(protocol: str) -> None:
    container = Container()
    server = MCPServer("feeds", lifespan=container.lifespan)
    events: list[str] = []
    started = anyio.Event()
    closed = anyio.Event()

    async def feed() -> AsyncIterator[str]:
        async def background() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                events.append("background stopped")

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(background)
                try:
                    yield "feed"
                finally:
                    events.append("finally")
                    await anyio.sleep(0)
                    events.append("after a checkpoint")
                    group.cancel_scope.cancel()
        finally:
            closed.set()

    @server.tool()
    @inject(container)
    async def watch(f: Annotated[str, Resolve(feed)]) -> str:
        started.set()
        await anyio.sleep_forever()
        return f  # pragma: no cover

    async with mcp_client(server, protocol) as session:
        with anyio.CancelScope() as leaving:
            async with anyio.create_task_group() as group:
                group.start_soon(session.call_tool, "watch", {})
                await started.wait()
                leaving.cancel()
        with anyio.fail_after(10):
            await closed.wait()
    assert events == ["finally", "after a checkpoint", "background stopped"]
