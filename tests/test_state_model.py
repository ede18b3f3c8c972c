"""State against a model of the calls that succeeded: a hypothesis state machine.

Random runs of opens, reads, edits, handlers that fail after editing, calls cancelled
mid-edit, deletes, question rounds (asked, then accepted, declined or abandoned) and
the clock moving past idle and lifetime limits, through real calls of a container, on
every store (memory, a SQLite file, a real Valkey), asyncio and trio. After every step,
a fresh read of every handle returns what the model says: the value of the last call
that succeeded, or "not found or expired" for a handle that was never written, was
deleted, or expired.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from pydantic import BaseModel

from resolvent import (
    Container,
    Elicit,
    Handle,
    Held,
    InputRequired,
    NotAccepted,
    Resolve,
    Scope,
    State,
    StateNotFound,
    StateStore,
)
from state_helpers import STORES, Clock, open_test_store

pytestmark = pytest.mark.network  # the Redis store talks to 127.0.0.1

# The clock moves by 40, 70 or 120 s: unused for 40+70 s, a handle is past IDLE; used
# all along, it is past LIFETIME after 70+70 s. No sum of moves lands within 5 s of either.
IDLE, LIFETIME = 105.0, 135.0
BUDGET = settings(
    max_examples=15,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class Box(BaseModel):
    n: int = 0


class Ok(BaseModel):
    ok: bool


class Broken(Exception):
    """The handler's own failure, after it changed the value."""


class Kit:
    """A container with one `State` on *store*, and the handlers the machine calls."""

    def __init__(self, store: StateStore) -> None:
        self.container = Container()
        self.gate: Callable[[], Awaitable[None]] | None = None
        self.minted: list[str] = []

        async def provide() -> AsyncIterator[StateStore]:
            yield store

        self.container.provide(provide, scope=Scope.APP)
        # A leftover lease would make the next call wait 0.2 s, then fail.
        boxes = State(
            "box",
            Box,
            store=provide,
            argument="box",
            idle_ttl=IDLE,
            max_lifetime=LIFETIME,
            wait=0.2,
        )

        async def open_box(n: int, new: Annotated[Held[Box], Resolve(boxes.new)]) -> str:
            new.value.n = n
            return new.handle

        async def open_fails(new: Annotated[Held[Box], Resolve(boxes.new)]) -> None:
            self.minted.append(new.handle)
            new.value.n = 1
            raise Broken("the handler failed after opening")

        async def read(box: Handle, value: Annotated[Box, Resolve(boxes.read)]) -> int:
            return value.n

        async def put(box: Handle, n: int, edit: Annotated[Held[Box], Resolve(boxes.edit)]) -> None:
            edit.value.n = n
            if self.gate is not None:
                await self.gate()

        async def put_fails(
            box: Handle, n: int, edit: Annotated[Held[Box], Resolve(boxes.edit)]
        ) -> None:
            edit.value.n = n
            raise Broken("the handler failed after editing")

        async def drop(box: Handle, edit: Annotated[Held[Box], Resolve(boxes.edit)]) -> None:
            edit.delete()

        async def bump(edit: Annotated[Held[Box], Resolve(boxes.edit)]) -> Held[Box]:
            edit.value.n += 1  # a resolver edits, then the call asks before it is done
            return edit

        async def confirm(held: Annotated[Held[Box], Resolve(bump)]) -> Elicit[Ok]:
            return Elicit(f"Keep box at {held.value.n}?", Ok)

        async def bump_confirmed(
            box: Handle,
            held: Annotated[Held[Box], Resolve(bump)],
            answer: Annotated[Ok, Resolve(confirm)],  # declined: NotAccepted
        ) -> int:
            if not answer.ok:
                raise Broken("not kept")
            return held.value.n

        self.open_box, self.open_fails, self.read, self.put = open_box, open_fails, read, put
        self.put_fails, self.drop, self.bump_confirmed = put_fails, drop, bump_confirmed

    async def run(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return await self.container.run(fn, **kwargs)

    async def round(self, answers: Any = None, state: str | None = None, **kwargs: Any) -> Any:
        """One round of a multi-round call: its answer, or the `InputRequired` it ended with."""
        async with self.container.call(rounds=True, answers=answers, state=state) as call:
            try:
                return await call.run(self.bump_confirmed, **kwargs)
            except InputRequired as pending:
                return pending

    async def cancelled_put(self, handle: str, n: int) -> bool:
        """An edit cancelled after it changed the value (False: the handle was not found)."""
        inside, found = anyio.Event(), [True]

        async def hang() -> None:
            inside.set()
            await anyio.sleep_forever()

        async def call() -> None:
            try:
                await self.run(self.put, box=handle, n=n)
            except StateNotFound:
                found[0] = False
                inside.set()

        self.gate = hang
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await inside.wait()
                group.cancel_scope.cancel()
        finally:
            self.gate = None
        return found[0]


def machine_for(kit: Kit, clock: Clock) -> type[RuleBasedStateMachine]:
    """A state machine class over *kit*; its rules run in a worker thread and call into
    the test's event loop."""

    def call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        async def inner() -> Any:
            return await fn(*args, **kwargs)

        return anyio.from_thread.run(inner)

    class StateMachine(RuleBasedStateMachine):
        handles = Bundle("handles")

        def __init__(self) -> None:
            super().__init__()
            # handle -> (value, when written first), or None: not found or expired
            self.model: dict[str, tuple[int, float] | None] = {}

        def expect(self, handle: str) -> int | None:
            entry = self.model[handle]
            return None if entry is None else entry[0]

        def written(self, handle: str, n: int) -> None:
            entry = self.model[handle]
            assert entry is not None
            self.model[handle] = (n, entry[1])

        @initialize(target=handles)
        def unknown(self) -> str:
            self.model["A" * 32] = None
            return "A" * 32

        @rule(target=handles, n=st.integers(0, 9))
        def open(self, n: int) -> str:
            handle: str = call(kit.run, kit.open_box, n=n)
            assert handle not in self.model
            self.model[handle] = (n, clock.now)
            return handle

        @rule(target=handles)
        def open_fails(self) -> str:
            with pytest.raises(Broken):
                call(kit.run, kit.open_fails)
            handle = kit.minted[-1]
            self.model[handle] = None
            return handle

        @rule(handle=handles)
        def read(self, handle: str) -> None:
            assert self.read_now(handle) == self.expect(handle)

        @rule(handle=handles, n=st.integers(0, 9))
        def edit(self, handle: str, n: int) -> None:
            if self.expect(handle) is None:
                with pytest.raises(StateNotFound):
                    call(kit.run, kit.put, box=handle, n=n)
            else:
                call(kit.run, kit.put, box=handle, n=n)
                self.written(handle, n)

        @rule(handle=handles, n=st.integers(0, 9))
        def edit_fails(self, handle: str, n: int) -> None:
            expected = StateNotFound if self.expect(handle) is None else Broken
            with pytest.raises(expected):
                call(kit.run, kit.put_fails, box=handle, n=n)

        @rule(handle=handles, n=st.integers(0, 9))
        def edit_cancelled(self, handle: str, n: int) -> None:
            found = call(kit.cancelled_put, handle, n)
            now = self.expect(handle)
            assert found is (now is not None)
            if now is not None:  # its lease ended with the call: editable again at once
                call(kit.run, kit.put, box=handle, n=now)

        @rule(handle=handles)
        def delete(self, handle: str) -> None:
            if self.expect(handle) is None:
                with pytest.raises(StateNotFound):
                    call(kit.run, kit.drop, box=handle)
            else:
                call(kit.run, kit.drop, box=handle)
                self.model[handle] = None

        @rule(handle=handles, answer=st.sampled_from(["accept", "decline", "abandon"]))
        def question_round(self, handle: str, answer: str) -> None:
            now = self.expect(handle)
            if now is None:
                with pytest.raises(StateNotFound):
                    call(kit.round, box=handle)
                return
            asked = call(kit.round, box=handle)
            assert isinstance(asked, InputRequired), asked
            # The round that asked wrote nothing, and left no lease behind.
            assert self.read_now(handle) == now
            if answer == "abandon":
                return
            [key] = asked.questions
            reply = {"action": "accept", "content": {"ok": True}}
            if answer == "decline":
                reply = {"action": "decline"}
                with pytest.raises(NotAccepted):
                    call(kit.round, {key: reply}, asked.state, box=handle)
                return
            assert call(kit.round, {key: reply}, asked.state, box=handle) == now + 1
            self.written(handle, now + 1)

        @rule(seconds=st.sampled_from([40.0, 70.0]))
        def time_passes(self, seconds: float) -> None:
            self.advance(seconds)

        @rule()
        def longer_than_idle_passes(self) -> None:
            self.advance(IDLE + 15)

        def advance(self, seconds: float) -> None:
            # Every live handle was read by the last check: past IDLE only in one step.
            clock.advance(seconds)
            for handle, entry in self.model.items():
                if entry is not None and (seconds > IDLE or clock.now - entry[1] > LIFETIME):
                    self.model[handle] = None

        def read_now(self, handle: str) -> int | None:
            try:
                n: int = call(kit.run, kit.read, box=handle)
            except StateNotFound as exc:
                assert "not found or expired" in str(exc)
                return None
            return n

        @invariant()
        def every_handle_reads_as_the_model_says(self) -> None:
            for handle in self.model:
                assert self.read_now(handle) == self.expect(handle), handle

    return StateMachine


@pytest.mark.parametrize("store_kind", STORES)
async def test_state_equals_the_model_of_the_calls_that_succeeded(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    valkey = request.getfixturevalue("valkey_url") if store_kind == "redis" else None
    clock = Clock()
    async with open_test_store(store_kind, tmp_path, valkey, clock) as store:
        kit = Kit(store)
        machine = machine_for(kit, clock)
        async with kit.container:
            await anyio.to_thread.run_sync(
                lambda: run_state_machine_as_test(machine, settings=BUDGET)
            )
