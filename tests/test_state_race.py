"""Many processes edit one handle at once: N processes x M edits leave exactly N*M.

SQLite (one file) and Redis (a real Valkey server), half the processes on asyncio and half
on trio. Each edit holds the handle's lease and writes with a compare-and-set, so no
update is lost between processes. The processes run in CI's slow job; the default run
races the same edits through one connection per worker in this process, on both backends.
"""

import contextlib
import os
import selectors
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from pydantic import BaseModel

from resolvent import Container, Held, Resolve, State

pytestmark = pytest.mark.network

WORKER = Path(__file__).with_name("state_race_worker.py")
ROOT = Path(__file__).resolve().parent.parent
PROCESSES, EDITS = 4, 25


def line_of(proc: "subprocess.Popen[str]", within: float = 120) -> str:
    """The worker's next line; fails (naming the worker) if none comes *within* seconds,
    instead of blocking the test until the suite's own timeout on a stuck worker."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(within):
            pytest.fail(f"worker {proc.args} printed nothing in {within} s")
    return proc.stdout.readline().strip()


class Counter(BaseModel):
    count: int = 0


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("valkey_url")
        return url
    return f"sqlite:///{tmp_path / 'race.db'}"


async def test_workers_each_on_its_own_connection_lose_no_edit(store_url: str) -> None:
    """The race below in one process: PROCESSES containers, each with its own store on the
    URL (a SQLite connection, a Valkey client), edit one handle at once. What keeps every
    edit is the store's own atomicity, which does not see whose process a connection is in."""
    states = [State("counter", Counter, store=store_url, wait=60) for _ in range(PROCESSES)]
    workers = [(Container(warm=[counters.store]), counters) for counters in states]
    async with contextlib.AsyncExitStack() as stack:
        for container, _ in workers:
            await stack.enter_async_context(container)
        first, counters = workers[0]

        async def create(counter: Annotated[Held[Counter], Resolve(counters.new)]) -> str:
            return counter.handle

        handle = await first.run(create)

        async def edit(container: Container, counters: State[Counter]) -> None:
            async def bump(
                counter: str, edit: Annotated[Held[Counter], Resolve(counters.edit)]
            ) -> None:
                edit.value.count += 1

            for _ in range(EDITS):
                await container.run(bump, counter=handle)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for container, states_of in workers:
                    group.start_soon(edit, container, states_of)

        async def read(counter: str, value: Annotated[Counter, Resolve(counters.read)]) -> int:
            return value.count

        assert await first.run(read, counter=handle) == PROCESSES * EDITS


@pytest.mark.slow  # in CI's slow job: PROCESSES interpreters start; the race itself is above
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_processes_racing_on_one_handle_lose_no_edit(store_url: str) -> None:
    counters = State("counter", Counter, store=store_url)
    container = Container()

    async def create(counter: Annotated[Held[Counter], Resolve(counters.new)]) -> str:
        return counter.handle

    async def read(counter: str, value: Annotated[Counter, Resolve(counters.read)]) -> int:
        return value.count

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    async with container:
        handle = await container.run(create)
        procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), store_url, handle, str(EDITS), backend],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for backend in ["asyncio", "trio"] * (PROCESSES // 2)
        ]
        try:
            for proc in procs:  # every process has its store open before any edits
                assert line_of(proc) == "ready"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            for proc in procs:
                assert line_of(proc) == "done"
                assert proc.wait(timeout=120) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert await container.run(read, counter=handle) == PROCESSES * EDITS


OPENER = Path(__file__).with_name("state_open_worker.py")


def test_processes_opening_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    # Worker processes of one server start together on a file that does not exist yet.
    # While one of them holds the new file's write lock (still in rollback-journal mode,
    # creating the schema), another's switch to WAL fails at once with "database is
    # locked", past the busy timeout; every store must wait for it and open.
    path = tmp_path / "new.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(OPENER), str(path), backend],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for backend in ["asyncio", "trio"] * (PROCESSES // 2)
    ]
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        for proc in procs:  # imported: the opens below start together
            assert line_of(proc) == "ready"
        holder.execute("BEGIN IMMEDIATE")  # the new file's write lock, in rollback mode
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        # Not a timed assertion: the lock goes after the opens have begun (well within
        # their 10 s busy timeout), whatever the machine's load.
        time.sleep(1)
        holder.execute("COMMIT")
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert (proc.returncode, out.strip()) == (0, "opened"), err
    finally:
        holder.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT count(*) FROM resolvent_state").fetchone() == (PROCESSES,)
