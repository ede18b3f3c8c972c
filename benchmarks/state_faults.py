"""How fast a call fails when its state store stops or freezes, and how much the server logs.

``python -m benchmarks.state_faults [--rounds 10] [--calls 3] [--stores sqlite,valkey]``

A cart server (``examples.cart_server`` over streamable HTTP, default timeouts) serves a
store. Each round breaks the store one way, then sends *calls* ``add_item`` calls one
after another (each from the SDK's client on a new connection: the first meets the
server's pooled connections to the store, the later ones what it opened since), times each
from its start until the client holds the tool error, and checks that the error says the
store is unavailable. Then it mends the store and times until an edit succeeds again.

Faults, and how they are mended:

- Valkey stopped: the server process is stopped (its port refuses connections); started
  again on the same port, empty, so the next round opens a new cart.
- Valkey frozen: its process is SIGSTOPped (connections stay open, nothing answers); SIGCONT.
- SQLite stopped: the database's directory is moved away; moved back.
- SQLite frozen: another process (this one) holds the file's write lock; released.

Log lines: what the server wrote to its stderr during the round, per failed call (a line
is a line a record wrote: the SDK's log handler, rich, would wrap one at 80 columns where
stderr is not a terminal, so the server runs with ``COLUMNS`` set wide). Prints p50 and
max per fault, with the machine's load.
"""

import argparse
import contextlib
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio

from .state_servers import Valkey, call, cart_server, load, quantiles, valkey

UNAVAILABLE = "state store is unavailable"


class Fault:
    """One way to break a store: *name*, *do* and *undo*; *fresh*: undoing empties it."""

    def __init__(
        self, name: str, do: Callable[[], object], undo: Callable[[], object], fresh: bool = False
    ) -> None:
        self.name, self.do, self.undo, self.fresh = name, do, undo, fresh


def sqlite_faults(folder: Path) -> list[Fault]:
    data, away = folder / "data", folder / "away"
    holder: list[sqlite3.Connection] = []

    def lock() -> None:
        conn = sqlite3.connect(data / "carts.db", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        holder.append(conn)

    def unlock() -> None:
        conn = holder.pop()
        conn.execute("ROLLBACK")
        conn.close()

    return [
        Fault(
            "stopped (directory moved away)", lambda: data.rename(away), lambda: away.rename(data)
        ),
        Fault("frozen (another process holds the write lock)", lock, unlock),
    ]


def valkey_faults(server: Valkey) -> list[Fault]:
    return [
        Fault("stopped (server process stopped)", server.stop, server.start, fresh=True),
        Fault("frozen (server process SIGSTOPped)", server.freeze, server.thaw),
    ]


async def measure(store: str, faults: list[Fault], rounds: int, calls: int, log: Path) -> None:
    async with cart_server(store, log) as server:
        for fault in faults:
            failed: list[float] = []
            recovered: list[float] = []
            lines = 0
            for _ in range(rounds):
                cart = (await call(server.url, "open_cart", {}))["cart"]
                await call(server.url, "add_item", {"cart": cart, "item": "fig"})
                before = server.log_lines()
                fault.do()
                try:
                    for _ in range(calls):
                        start = time.monotonic()
                        try:
                            with anyio.fail_after(120):
                                await call(server.url, "add_item", {"cart": cart, "item": "x"})
                        except RuntimeError as exc:
                            assert UNAVAILABLE in str(exc), exc
                            failed.append(time.monotonic() - start)
                        else:
                            raise AssertionError(f"an add succeeded with the store {fault.name}")
                finally:
                    fault.undo()
                mended = time.monotonic()
                with anyio.fail_after(60):
                    while True:
                        try:
                            if fault.fresh:
                                cart = (await call(server.url, "open_cart", {}))["cart"]
                            await call(server.url, "add_item", {"cart": cart, "item": "y"})
                            break
                        except RuntimeError:
                            await anyio.sleep(0.01)
                recovered.append(time.monotonic() - mended)
                lines += server.log_lines() - before
            print(
                f"  {fault.name}: a call fails after {quantiles(failed)}; "
                f"{lines / len(failed):.2f} log lines per failed call; "
                f"edits again {quantiles(recovered)} after the store is back"
            )
    logged = log.read_text(errors="replace").splitlines() if log.exists() else []
    print(f"  the last line logged: {' '.join(logged[-1].split()) if logged else '(none)'}")


@contextlib.contextmanager
def sqlite_store() -> Iterator[tuple[str, list[Fault], Path]]:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "data").mkdir()
        yield f"sqlite:///{folder / 'data' / 'carts.db'}", sqlite_faults(folder), folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,valkey")
    args = parser.parse_args()
    for store in args.stores.split(","):
        print(f"{store} ({load()}):")
        if store == "sqlite":
            with sqlite_store() as (url, faults, folder):
                anyio.run(measure, url, faults, args.rounds, args.calls, folder / "server.log")
        else:
            with valkey() as server, tempfile.TemporaryDirectory() as name:
                log = Path(name) / "server.log"
                anyio.run(measure, server.url, valkey_faults(server), args.rounds, args.calls, log)
        print(f"  after: {load()}")


if __name__ == "__main__":
    main()
