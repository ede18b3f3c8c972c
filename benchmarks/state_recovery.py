"""Recovery after a SIGKILLed lease holder: how long a cart stays locked, from the kill.

``python -m benchmarks.state_recovery [--kills 20] [--stores sqlite,valkey] [--lease 4]``

A cart server (``examples.cart_server`` over streamable HTTP, ``--lease``) serves a store
(a SQLite file, a Valkey server). A holder process over the same store, with the server's
own ``State("cart", ...)``, is in the middle of an edit of a cart: its handler waits
forever while the holder renews the lease every quarter of the lease time. At a random
moment within one lease time of taking the lease it is SIGKILLed, and from that moment a
client times until the server's ``add_item`` on that cart succeeds (the server waits for
the lease up to its ``wait=``, 10 s; a call that fails anyway is sent again). Nobody renews
a dead holder's lease, so it lapses within ``lease`` seconds of its last renewal. Prints
p50 and max per store, with the machine's load.
"""

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import anyio

from resolvent import Container, Held, Resolve, State

from .state_servers import ENV, ROOT, call, cart_server, load, quantiles, valkey


async def hold(url: str, handle: str, lease: float) -> None:
    """The holder: take the cart's lease, say so, and wait to be killed."""
    from examples.cart_server.server import Cart

    carts = State("cart", Cart, store=url, lease=lease, wait=60)
    container = Container(warm=[carts.store])

    async def stuck(cart: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]) -> None:
        edit.value.items["held"] = 1
        print("holding", flush=True)
        await anyio.sleep_forever()

    async with container:
        await container.run(stuck, cart=handle)


async def measure(url: str, kills: int, lease: float, folder: Path) -> list[float]:
    rng = random.Random()
    times = []
    async with cart_server(url, folder / "server.log", "--lease", str(lease)) as server:
        handle = (await call(server.url, "open_cart", {}))["cart"]
        for n in range(kills):
            holder = subprocess.Popen(
                [
                    *(sys.executable, "-m", "benchmarks.state_recovery"),
                    *("--hold", url, handle, "--lease", str(lease)),
                ],
                cwd=ROOT,
                env=ENV,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            line = await anyio.to_thread.run_sync(holder.stdout.readline)
            assert line.strip() == "holding", line
            await anyio.sleep(rng.uniform(0, lease))  # mid-edit, renewed meanwhile
            holder.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            while True:
                try:
                    added = await call(server.url, "add_item", {"cart": handle, "item": "x"})
                    break
                except RuntimeError:  # still locked after the server's wait: once more
                    continue
            times.append(time.monotonic() - killed)
            holder.wait()
            # The dead holder's edit wrote nothing; every add did.
            assert added["items"] == {"x": n + 1}, added
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
    print(f"before: {load()}")
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            if store == "sqlite":
                times = anyio.run(
                    measure, f"sqlite:///{folder}/state.db", args.kills, args.lease, folder
                )
            else:
                with valkey() as server:
                    times = anyio.run(measure, server.url, args.kills, args.lease, folder)
        print(
            f"{store}: recovery after a SIGKILLed lease holder, from the kill "
            f"(lease={args.lease:g} s): {quantiles(times)}; {load()}"
        )


if __name__ == "__main__":
    main()
