"""Servers killed mid-edit: three cart servers over one store, one SIGKILLed at random.

Eight clients each add 25 items to their own cart through three cart server processes
(examples/cart_server over streamable HTTP) that share one store (a SQLite file, a real
Valkey), while one of the servers is SIGKILLed at random moments, often holding a cart's
lease, and started again. A client whose call failed (its server died, the answer never
came) retries on the next server until one acknowledges the add.

Then five recovery rounds: every cart's next add is in flight on one server when it is
killed; from the moment it is back, each cart must take an edit within 5 s, since the dead
server's leases lapse by themselves (each round's time is printed, with p50 and max).

With idempotency keys (each retry sends its add's key), every cart holds exactly its 25
items, each once: 200 in all. Without them, a retry may repeat an add that had been applied
before its answer was lost, so each acknowledged item is there at least once (the doubles
are counted and printed).

Slow (a few minutes per store): ``pytest -m slow tests/test_state_crash.py -s``.
"""

import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client

from mcp_helpers import free_port, wait_listening

pytestmark = [pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parent.parent
SERVE = [sys.executable, "-m", "examples.cart_server", "--transport", "http"]
CARTS, ADDS, SERVERS, KILLS, ROUNDS = 8, 25, 3, 5, 5
RECOVERY = 5.0  # seconds from the servers being back to every cart taking an edit


class Server:
    """One cart server process on a fixed port, which the test kills and starts again."""

    def __init__(self, store: str, tmp_path: Path) -> None:
        self.store = store
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = tmp_path / f"server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}

    async def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [*SERVE, "--port", str(self.port), "--store", self.store],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        await wait_listening(self.port)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


async def call(url: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One tool call on a new connection; raises on any failure, a tool error included."""
    async with Client(url, mode="legacy") as client:
        result: types.CallToolResult = await client.call_tool(tool, arguments)
    if result.is_error:
        content = result.content[0]
        raise RuntimeError(content.text if isinstance(content, types.TextContent) else "error")
    return result.structured_content


def arguments(cart: str, n: int, keyed: bool) -> dict[str, Any]:
    """Add item *n* to *cart*, with its own idempotency key when *keyed*."""
    found: dict[str, Any] = {"cart": cart, "item": f"i{n}"}
    if keyed:
        found["idempotency_key"] = f"{cart}-{n}"
    return found


async def add_until_acknowledged(
    servers: list[Server], cart: str, n: int, first: int, keyed: bool
) -> None:
    """Add item *n* to *cart*, retrying on the next server (with the same key, when
    *keyed*) until a server acknowledges it."""
    for attempt in range(200):
        with anyio.move_on_after(30):
            try:
                url = servers[(first + attempt) % len(servers)].url
                await call(url, "add_item", arguments(cart, n, keyed))
                return
            except Exception:  # the server died, the answer never came, a lease was held
                pass
        await anyio.sleep(0.05)
    pytest.fail(f"add {n} of {cart} was never acknowledged")


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("valkey_url")
        return url + "/0"
    return f"sqlite:///{tmp_path / 'carts.db'}"


@pytest.mark.parametrize("keyed", [True, False], ids=["idempotency-keys", "no-keys"])
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killed_servers_lose_no_acknowledged_add_and_double_none(
    store_url: str, tmp_path: Path, keyed: bool
) -> None:
    rng = random.Random()
    servers = [Server(store_url, tmp_path) for _ in range(SERVERS)]
    recoveries: list[float] = []
    try:
        with anyio.fail_after(600):
            async with anyio.create_task_group() as group:
                for server in servers:
                    group.start_soon(server.start)
            carts = [(await call(servers[0].url, "open_cart", {}))["cart"] for _ in range(CARTS)]

            # Every cart but its last ROUNDS adds, while a server is killed at random moments.
            adding = anyio.Event()

            async def shopper(i: int) -> None:
                for n in range(ADDS - ROUNDS):
                    await add_until_acknowledged(servers, carts[i], n, i + n, keyed)

            async def killer() -> None:
                for _ in range(KILLS):
                    with anyio.move_on_after(rng.uniform(0.3, 2.0)):
                        await adding.wait()
                    if adding.is_set():
                        return
                    victim = rng.choice(servers)
                    victim.kill()
                    await victim.start()

            async with anyio.create_task_group() as group:
                group.start_soon(killer)
                async with anyio.create_task_group() as shoppers:
                    for i in range(CARTS):
                        shoppers.start_soon(shopper, i)
                adding.set()

            # Recovery rounds: every cart's next add in flight on one server, killed in
            # the middle of them; timed from the moment it is back.
            for n in range(ADDS - ROUNDS, ADDS):
                victim = servers[n % SERVERS]
                async with anyio.create_task_group() as group:
                    for cart in carts:
                        group.start_soon(_try_once, victim.url, arguments(cart, n, keyed))
                    await anyio.sleep(rng.uniform(0.05, 0.3))
                    victim.kill()
                await victim.start()
                back = anyio.current_time()
                with anyio.fail_after(RECOVERY):  # the dead server's leases lapse by themselves
                    async with anyio.create_task_group() as group:
                        for i, cart in enumerate(carts):
                            group.start_soon(add_until_acknowledged, servers, cart, n, i, keyed)
                recoveries.append(anyio.current_time() - back)

            total = 0
            for cart in carts:
                shown = await call(servers[1].url, "show_cart", {"cart": cart})
                items: dict[str, int] = shown["items"]
                total += sum(items.values())
                if keyed:  # each add once, however often it was retried
                    assert items == {f"i{n}": 1 for n in range(ADDS)}, cart
                else:  # each acknowledged add there; a retried one possibly twice
                    assert set(items) == {f"i{n}" for n in range(ADDS)}, cart
                    assert all(count >= 1 for count in items.values()), cart
            if keyed:
                assert total == CARTS * ADDS
            ordered = sorted(recoveries)
            print(
                f"\n{store_url.split(':')[0]} keyed={keyed}: {total} items for "
                f"{CARTS * ADDS} acknowledged adds ({total - CARTS * ADDS} doubled); "
                f"recovery after {len(ordered)} kills of a lease holder: "
                f"p50 {statistics.median(ordered):.2f} s, max {ordered[-1]:.2f} s "
                f"({', '.join(f'{r:.2f}' for r in recoveries)})"
            )
    except BaseException:
        for server in servers:
            print(f"--- {server.log.name}\n{server.log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        for server in servers:
            server.stop()


async def _try_once(url: str, arguments: dict[str, Any]) -> None:
    # Its server is killed meanwhile: the retry after it decides.
    with contextlib.suppress(Exception):
        await call(url, "add_item", arguments)
