"""One process opening a SQLite state store that other processes open at the same time.

``python state_open_worker.py PATH BACKEND``: prints "ready" once imported, waits for a
line on stdin, opens the store at PATH (creating it), writes one value, prints "opened".
"""

import os
import sys

import anyio

from resolvent import SqliteStore, StateKey


async def main(path: str) -> None:
    store = await SqliteStore.open(path)
    try:
        await store.create(StateKey("k", "o", f"{os.getpid():032d}"), b"x", 60, 60)
    finally:
        await store.aclose()
    print("opened", flush=True)


if __name__ == "__main__":
    print("ready", flush=True)
    sys.stdin.readline()
    anyio.run(main, sys.argv[1], backend=sys.argv[2])
