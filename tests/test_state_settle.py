"""A call's writes settle when its outcome is known, before its answer leaves.

The core's side: a resource marked `settles` (here a transaction that records its
outcome, not `State`) commits on success and rolls back otherwise, before
`Container.run` returns and, through `Call.settle`, while the call's other resources are
still open; a multi-round call's round that ends by asking rolls back. Then `State`
itself on every store (pairwise with the modes and backends: `stores_and_modes`): a round
that asks writes nothing and stores nothing, a refused write is the call's error and
changes nothing. Every execution mode, asyncio and trio.
The web and MCP sides are in test_state_settle_web.py and test_state_settle_mcp.py.
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest

from modes import MODES, make_container, run
from resolvent import (
    Container,
    Elicit,
    InputRequired,
    NotAccepted,
    Resolve,
    StateConflict,
    StateNotFound,
    StateTooLarge,
    settles,
)
from settle_helpers import Booking, Declined, Faulty, Ok, values
from state_helpers import open_kind, stores_and_modes


class Tx:
    """A transaction that records what became of it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.rows: list[str] = []


def transactional(container: Container, log: list[str]) -> tuple[Any, Any]:
    """A settling transaction and an ordinary resource, registered on *container*."""

    @container.provider
    @settles
    async def transaction() -> AsyncIterator[Tx]:
        tx = Tx(log)
        log.append("begin")
        try:
            yield tx
        except BaseException as exc:
            log.append(f"rollback {type(exc).__name__}")
            raise
        log.append(f"commit {','.join(tx.rows)}")

    @container.provider
    async def connection() -> AsyncIterator[str]:
        log.append("connect")
        yield "conn"
        log.append("disconnect")

    return transaction, connection


def opened(log: list[str]) -> list[str]:
    """*log* after both resources opened (concurrent branches open them in any order)."""
    assert sorted(log[:2]) == ["begin", "connect"], log
    return log[2:]


# "tiered": a container as made by default, whose plans start interpreted, then turn hot.
@pytest.mark.parametrize("mode", [*MODES, "tiered"])
async def test_a_settling_resource_commits_or_rolls_back_before_run_returns(mode: str) -> None:
    log: list[str] = []
    container = make_container(mode)
    transaction, connection = transactional(container, log)

    async def handler(
        conn: Annotated[str, Resolve(connection)], tx: Annotated[Tx, Resolve(transaction)]
    ) -> str:
        tx.rows.append("a")
        log.append("handler")
        return "done"

    async def failing(tx: Annotated[Tx, Resolve(transaction)]) -> str:
        tx.rows.append("b")
        raise Declined("no")

    async with container:
        for _ in range(3):  # cold and hot plans alike
            log.clear()
            assert await run(container, handler, mode) == "done"
            assert opened(log)[0] == "handler"
            assert sorted(log[3:]) == ["commit a", "disconnect"]  # in reverse order of opening
            log.clear()
            with pytest.raises(Declined):
                await run(container, failing, mode)
            assert log == ["begin", "rollback Declined"]


@pytest.mark.parametrize("mode", MODES)
async def test_call_settle_commits_while_other_resources_stay_open(mode: str) -> None:
    # What an integration does before it sends an answer and keeps the call open to
    # stream: the transaction commits; the connection closes with the call.
    log: list[str] = []
    container = make_container(mode)
    transaction, connection = transactional(container, log)

    async def handler(
        conn: Annotated[str, Resolve(connection)], tx: Annotated[Tx, Resolve(transaction)]
    ) -> str:
        tx.rows.append("a")
        return "done"

    async with container:
        async with container.call(rounds=mode == "interpreter") as call:
            assert await call.run(handler) == "done"
            await call.settle()
            assert opened(log) == ["commit a"]
            await call.settle()  # once only
        assert opened(log) == ["commit a", "disconnect"]
        log.clear()
        with pytest.raises(Declined):
            async with container.call() as call:
                await call.run(handler)
                error = Declined("the answer could not be sent")
                await call.settle(error)  # rolled back with the call's failure
                assert opened(log) == ["rollback Declined"]
                raise error


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", ["async", "sync"])
async def test_a_settling_context_manager_closes_once(shape: str, mode: str) -> None:
    # A settling resource written as a class, whose exit commits each time it is
    # called (a generator runs its teardown once whatever happens): it closes when the
    # call settles, and not again with the call's other resources.
    log: list[str] = []
    container = make_container(mode)

    class Unit:
        def __enter__(self) -> str:
            log.append("begin")
            return "unit"

        def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            log.append("commit" if exc is None else f"rollback {type(exc).__name__}")

    class AsyncUnit(Unit):
        async def __aenter__(self) -> str:
            return self.__enter__()

        async def __aexit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            self.__exit__(tp, exc, tb)

    if shape == "async":

        @container.provider
        @settles
        def unit() -> contextlib.AbstractAsyncContextManager[str]:
            return AsyncUnit()
    else:

        @container.provider(inline=True)
        @settles
        def unit() -> contextlib.AbstractContextManager[str]:
            return Unit()

    async def handler(u: Annotated[str, Resolve(unit)]) -> str:
        return u

    async def failing(u: Annotated[str, Resolve(unit)]) -> str:
        raise Declined("no")

    async with container:
        assert await run(container, handler, mode) == "unit"
        with pytest.raises(Declined):
            await run(container, failing, mode)
        async with container.call(rounds=mode == "interpreter") as call:
            await call.run(handler)
            await call.settle()
            await call.settle()
    assert log == ["begin", "commit", "begin", "rollback Declined", "begin", "commit"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_commit_under_way_finishes_when_the_caller_is_cancelled(mode: str) -> None:
    # A client that leaves while its call commits: the commit runs to its end, shielded
    # as every teardown is.
    log: list[str] = []
    committing, answered = anyio.Event(), anyio.Event()
    container = make_container(mode)

    @container.provider
    @settles
    async def transaction() -> AsyncIterator[str]:
        yield "tx"
        committing.set()
        await answered.wait()  # the database's answer to the commit
        log.append("committed")

    async def handler(tx: Annotated[str, Resolve(transaction)]) -> str:
        return tx

    async def request(scope: anyio.CancelScope) -> None:
        with scope:
            async with container.call(rounds=mode == "interpreter") as call:
                await call.run(handler)
                await call.settle()

    async with container, anyio.create_task_group() as group:
        scope = anyio.CancelScope()
        group.start_soon(request, scope)
        await committing.wait()
        scope.cancel()  # the client left
        await anyio.sleep(0)
        answered.set()
    assert log == ["committed"]


@pytest.mark.parametrize("mode", ["interpreter", "concurrent", "timeout"])
async def test_a_round_that_asks_rolls_back_and_the_last_round_commits(mode: str) -> None:
    log: list[str] = []
    container = make_container(mode)
    transaction, connection = transactional(container, log)

    async def reserve(tx: Annotated[Tx, Resolve(transaction)]) -> Tx:
        tx.rows.append("seat")
        return tx

    async def confirm(
        tx: Annotated[Tx, Resolve(reserve)], conn: Annotated[str, Resolve(connection)]
    ) -> Elicit[Ok]:
        return Elicit(f"Keep {len(tx.rows)} seat?", Ok)

    async def book(tx: Annotated[Tx, Resolve(reserve)], ok: Annotated[Ok, Resolve(confirm)]) -> str:
        return "booked" if ok.ok else "not booked"

    async with container:
        async with container.call(rounds=True) as call:  # as the MCP adapter runs a round
            with pytest.raises(InputRequired) as asked:
                await call.run(book)
            # Rolled back as the round asked, before its question leaves.
            assert opened(log) == ["rollback InputRequired"]
        # The ordinary resource closes as ever, with no error.
        assert log[2:] == ["rollback InputRequired", "disconnect"]
        [key] = asked.value.questions
        log.clear()
        answers = {key: {"action": "accept", "content": {"ok": True}}}
        async with container.call(rounds=True, answers=answers, state=asked.value.state) as call:
            assert await call.run(book) == "booked"
        assert sorted(opened(log)) == ["commit seat", "disconnect"]


@pytest.mark.parametrize("where", ["resolver", "handler"])
async def test_a_round_a_resolver_or_handler_forwards_rolls_back_before_it_leaves(
    where: str,
) -> None:
    """An `InputRequired` that the call's own code raises (a round of another server it
    forwards) ends the round as asking does: rolled back before it reaches the caller,
    whether the generated code ran the whole call or a resolver raised it."""
    log: list[str] = []
    container = Container()
    transaction, connection = transactional(container, log)
    forwarded = InputRequired({"other": "Keep it?"}, "other-state")

    async def reserve(tx: Annotated[Tx, Resolve(transaction)]) -> Tx:
        if where == "resolver":
            raise forwarded
        return tx

    async def book(
        tx: Annotated[Tx, Resolve(reserve)], conn: Annotated[str, Resolve(connection)]
    ) -> str:
        raise forwarded

    async with container:
        for _ in range(2):  # its first call interpreted, then its generated code
            log.clear()
            async with container.call(rounds=True) as call:
                with pytest.raises(InputRequired) as asked:
                    await call.run(book)
                assert asked.value is forwarded
                if where == "resolver":  # before the connection opened
                    assert log == ["begin", "rollback InputRequired"]
                else:
                    assert opened(log) == ["rollback InputRequired"]
            if where == "handler":
                assert log[2:] == ["rollback InputRequired", "disconnect"]


# -- State on every store ------------------------------------------------------------------


@pytest.fixture
async def store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Faulty]:
    async with open_kind(request, store_kind, tmp_path) as inner:
        yield Faulty(inner)


def booking_for(store: Faulty, mode: str) -> Booking:
    return Booking(store, make_container(mode))


async def open_show(booking: Booking) -> str:
    handle: str = await booking.container.run(booking.open_plain)
    return handle


async def one_round(
    booking: Booking, fn: Any, answers: Any = None, state: str | None = None, **kwargs: Any
) -> Any:
    """One round of a multi-round call, as the MCP adapter runs it: a question ends the
    round inside the call's block (returned as the `InputRequired`)."""
    async with booking.container.call(rounds=True, answers=answers, state=state) as call:
        try:
            return await call.run(fn, **kwargs)
        except InputRequired as pending:
            return pending


# A multi-round call is always interpreted: "generated" runs as "interpreter" does here.
ROUND_MODES = [mode for mode in MODES if mode != "generated"]


@stores_and_modes(ROUND_MODES)
async def test_a_declined_round_writes_nothing(store: Faulty, mode: str) -> None:
    booking = booking_for(store, mode)
    async with booking.container:
        show = await open_show(booking)
        asked = await one_round(booking, booking.book, show=show)
        assert isinstance(asked, InputRequired)
        # The reservation the resolver made is not written, and its lease is gone: a
        # read does not wait for it.
        assert (await values(booking, show)).model_dump() == {
            "left": 10,
            "reserved": 0,
            "notes": [],
        }
        [key] = asked.questions
        declined = {key: {"action": "decline"}}
        with pytest.raises(NotAccepted):
            await one_round(booking, booking.book, declined, asked.state, show=show)
        assert (await values(booking, show)).left == 10
        accepted = {key: {"action": "accept", "content": {"ok": True}}}
        booked = await one_round(booking, booking.book, accepted, asked.state, show=show)
        assert booked == {"left": 9, "reserved": 1}
        assert (await values(booking, show)).model_dump()["reserved"] == 1


@stores_and_modes(ROUND_MODES)
async def test_new_stores_no_value_for_a_round_that_asks(store: Faulty, mode: str) -> None:
    booking = booking_for(store, mode)
    async with booking.container:
        for _ in range(2):  # a client that starts over twice: each round mints a handle
            asked = await one_round(booking, booking.open_show)
            assert isinstance(asked, InputRequired)
        assert len(booking.minted) == 2
        assert store.created == []
        for handle in booking.minted:  # no orphan value behind any of them
            with pytest.raises(StateNotFound):
                await values(booking, handle)
        [key] = asked.questions
        answers = {key: {"action": "accept", "content": {"ok": True}}}
        handle = await one_round(booking, booking.open_show, answers, asked.state)
        assert store.created == [handle] == booking.minted[-1:]
        assert (await values(booking, handle)).left == 10


@stores_and_modes(MODES)
async def test_a_refused_write_is_the_calls_error_and_changes_nothing(
    store: Faulty, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    booking = booking_for(store, mode)
    async with booking.container:
        show = await open_show(booking)
        assert await booking.container.run(booking.note, show=show, text="a") == 1
        with pytest.raises(StateTooLarge, match="over the limit of 300"):
            await booking.container.run(booking.note, show=show, text="x" * 400)
        store.refuse = True
        with pytest.raises(StateConflict, match="nothing of this call was written"):
            await booking.container.run(booking.note, show=show, text="b")
        store.refuse = False
        assert (await values(booking, show)).notes == ["a"]
        store.fail = ConnectionError("store down")
        with pytest.raises(ConnectionError):
            await booking.container.run(booking.open_plain)
        store.fail = None
        assert await booking.container.run(booking.note, show=show, text="c") == 2
    # The caller has each error: none is also logged as a teardown that failed.
    assert [r.getMessage() for r in caplog.records if "teardown" in r.getMessage()] == []


def test_settles_refuses_what_takes_no_attributes() -> None:
    with pytest.raises(TypeError, match="@settles cannot mark"):
        settles(len)


async def test_a_settling_teardowns_error_is_the_calls_or_a_note_on_the_calls_own() -> None:
    # What an integration's `call.settle` gives it: "an error its teardown raises after a
    # success is the call's error"; after a failure the handler's error stays the call's,
    # with the teardown's as a note.
    broken = {"commit": False, "rollback": False}
    container = Container()

    @container.provider
    @settles
    async def transaction() -> AsyncIterator[Tx]:
        try:
            yield Tx([])
        except BaseException:
            if broken["rollback"]:
                raise RuntimeError("rollback failed") from None
            raise
        if broken["commit"]:
            raise RuntimeError("commit failed")

    async def handler(tx: Annotated[Tx, Resolve(transaction)]) -> str:
        return "done"

    async with container:
        broken["commit"] = True
        async with container.call() as call:
            assert await call.run(handler) == "done"
            with pytest.raises(RuntimeError, match=r"^commit failed$"):
                await call.settle()
        broken.update(commit=False, rollback=True)
        declined = Declined("no")
        async with container.call() as call:
            assert await call.run(handler) == "done"
            await call.settle(declined)  # the answer failed after all: roll back
        assert declined.__notes__ == [
            "resolvent: a finalizer also failed during teardown: RuntimeError('rollback failed')"
        ]
