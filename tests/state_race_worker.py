"""One process of the multi-process race: M edits of one handle, started on a signal.

``python state_race_worker.py STORE_URL HANDLE EDITS``: prints "ready" once its store is
open, waits for a line on stdin, makes EDITS edits (each adds one), prints "done".
"""

import sys
from typing import Annotated

import anyio
from pydantic import BaseModel

from resolvent import Container, Held, Resolve, State


class Counter(BaseModel):
    count: int = 0


async def main(url: str, handle: str, edits: int) -> None:
    counters = State("counter", Counter, store=url, wait=60)
    container = Container(warm=[counters.store])

    async def bump(counter: str, edit: Annotated[Held[Counter], Resolve(counters.edit)]) -> None:
        edit.value.count += 1

    async with container:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        for _ in range(edits):
            await container.run(bump, counter=handle)
    print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), backend=sys.argv[4])
