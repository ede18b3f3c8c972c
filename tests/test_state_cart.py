"""The cart example (examples/cart_server) through the MCP SDK's own client.

In memory, on both protocol revisions: the handle is a described string argument, the
cart itself never appears, checkout asks and keeps or deletes, a stale handle is a tool
error the client reads. Over streamable HTTP on 127.0.0.1: two server processes share one
store (SQLite file, real Valkey), a cart opened on one is filled on the other, concurrent
add_item calls from several clients lose nothing, checkout is accepted and declined, and a
second principal is refused.
"""

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from examples.cart_server.server import create_server
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from mcp_helpers import MODES, answering, client, free_port, wait_listening

ROOT = Path(__file__).resolve().parent.parent
SERVE = [sys.executable, "-m", "examples.cart_server", "--transport", "http"]


def structured(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


@pytest.mark.parametrize("mode", MODES)
async def test_cart_tools_in_memory(mode: str) -> None:
    server, _ = create_server()
    decline = answering("decline")
    async with client(server, mode, elicitation_callback=decline) as c:
        tools = {tool.name: tool for tool in (await c.list_tools()).tools}
        schema = tools["add_item"].input_schema
        # The cart value is hidden; the idempotency key is an optional, described argument.
        assert set(schema["properties"]) == {"cart", "item", "qty", "idempotency_key"}
        assert "retry" in schema["properties"]["idempotency_key"]["description"]
        assert "idempotency_key" not in schema["required"]
        assert schema["properties"]["cart"]["type"] == "string"
        assert "open_cart" in schema["properties"]["cart"]["description"]
        assert tools["open_cart"].input_schema.get("properties", {}) == {}

        handle = structured(await c.call_tool("open_cart", {}))["cart"]
        await c.call_tool("add_item", {"cart": handle, "item": "apple", "qty": 2})
        once = {"cart": handle, "item": "pear", "idempotency_key": "pear-1"}
        added = structured(await c.call_tool("add_item", once))
        assert added == {"items": {"apple": 2, "pear": 1}}
        assert structured(await c.call_tool("add_item", once)) == added  # a retry: no change
        assert structured(await c.call_tool("show_cart", {"cart": handle})) == added

        # Declined: nothing ordered, the cart kept.
        assert structured(await c.call_tool("checkout", {"cart": handle})) == {"ordered": {}}
        assert decline.asked == ["Buy 3 items: apple x2, pear x1?"]
        assert structured(await c.call_tool("show_cart", {"cart": handle})) == added

        forged = error_text(await c.call_tool("show_cart", {"cart": "A" * 32}))
        assert "not found or expired" in forged

        # The memory store lives as long as the server's APP scope: one connection here.
        decline.default = ("accept", {"confirm": True})
        ordered = structured(await c.call_tool("checkout", {"cart": handle}))
        assert ordered == {"ordered": {"apple": 2, "pear": 1}}
        gone = error_text(await c.call_tool("show_cart", {"cart": handle}))
        assert gone.replace(handle, "H") == forged.replace("A" * 32, "H")  # one message

        # One item is one item.
        decline.default = ("decline", None)
        single = structured(await c.call_tool("open_cart", {}))["cart"]
        await c.call_tool("add_item", {"cart": single, "item": "kiwi"})
        await c.call_tool("checkout", {"cart": single})
        assert decline.asked[-1] == "Buy 1 item: kiwi x1?"

        other = structured(await c.call_tool("open_cart", {}))["cart"]
        await c.call_tool("add_item", {"cart": other, "item": "fig"})
        decline.default = ("accept", {"confirm": False})
        assert structured(await c.call_tool("checkout", {"cart": other})) == {"ordered": {}}
        kept = structured(await c.call_tool("show_cart", {"cart": other}))
        assert kept == {"items": {"fig": 1}}


@contextmanager
def cart_servers(
    store: str, tmp_path: Path, count: int = 2, workers: int = 1
) -> Iterator[list[str]]:
    """*count* cart servers on free ports (each with *workers* uvicorn worker processes),
    one store, one request-state key."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice-token": "alice", "bob-token": "bob"}))
    env = {
        **os.environ,
        "CART_STATE_KEY": secrets.token_hex(32),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")]),
    }
    ports = [free_port() for _ in range(count)]
    # The servers' logs go to files, not pipes: a pipe nobody reads fills up and stalls
    # the server, and a file can be shown when a server does not come up.
    logs = [tmp_path / f"server-{port}.log" for port in ports]
    procs = []
    for port, log in zip(ports, logs, strict=True):
        with log.open("wb") as err:
            procs.append(
                subprocess.Popen(
                    [
                        *SERVE,
                        *("--port", str(port), "--store", store, "--tokens", str(tokens)),
                        *("--workers", str(workers)),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    try:
        yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
    except BaseException:
        for log in logs:
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def as_user(url: str, token: str, mode: str, **kwargs: Any) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs)


async def checkout_in_two_rounds(first_url: str, second_url: str, handle: str) -> Any:
    """A 2026-07-28 checkout answered by hand: round 1 on *first_url*, the accepted answer
    and the request state on a new connection to *second_url*. Returns the structured result;
    the client's callback is never asked (the rounds go by hand)."""
    never = answering("cancel")  # declares the capability
    async with as_user(first_url, "alice-token", "2026-07-28", elicitation_callback=never) as a:
        first = await a.session.call_tool("checkout", {"cart": handle}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    assert first.input_requests is not None
    (key,) = first.input_requests
    answer = types.ElicitResult(action="accept", content={"confirm": True})
    async with as_user(second_url, "alice-token", "2026-07-28", elicitation_callback=never) as b:
        done = await b.call_tool(
            "checkout",
            {"cart": handle},
            input_responses={key: answer},
            request_state=first.request_state,
        )
    assert never.asked == []
    return structured(done)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("valkey_url")
        return url + "/0"
    return f"sqlite:///{tmp_path / 'carts.db'}"  # an absolute path: four slashes


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
async def test_two_server_processes_share_carts_over_http(store_url: str, tmp_path: Path) -> None:
    with cart_servers(store_url, tmp_path) as (url_a, url_b), anyio.fail_after(120):
        for url in (url_a, url_b):
            await wait_listening(int(url.split(":")[2].split("/")[0]))
        async with as_user(url_a, "alice-token", "legacy") as a:
            handle = structured(await a.call_tool("open_cart", {}))["cart"]
        async with as_user(url_b, "alice-token", "2026-07-28") as b:
            added = structured(await b.call_tool("add_item", {"cart": handle, "item": "apple"}))
        assert added == {"items": {"apple": 1}}

        # Six clients, half on each process and on each protocol, add at the same time.
        clients, adds = 6, 5

        async def shopper(i: int) -> None:
            url = (url_a, url_b)[i % 2]
            async with as_user(url, "alice-token", MODES[i // 2 % 2]) as c:
                for _ in range(adds):
                    result = await c.call_tool("add_item", {"cart": handle, "item": "pear"})
                    assert not result.is_error, result.content

        async with anyio.create_task_group() as group:
            for i in range(clients):
                group.start_soon(shopper, i)
        async with as_user(url_a, "alice-token", "legacy") as a:
            shown = structured(await a.call_tool("show_cart", {"cart": handle}))
        assert shown == {"items": {"apple": 1, "pear": clients * adds}}

        # Another principal: the same message as any unknown handle, and no change.
        async with as_user(url_b, "bob-token", "2026-07-28") as bob:
            refused = await bob.call_tool("add_item", {"cart": handle, "item": "x"})
            assert "not found or expired" in error_text(refused)
            assert "not found or expired" in error_text(
                await bob.call_tool("show_cart", {"cart": handle})
            )

        # Checkout: declined on one process (2026-07-28 rounds), accepted on the other.
        decline = answering("decline")
        async with as_user(url_b, "alice-token", "2026-07-28", elicitation_callback=decline) as b:
            kept = structured(await b.call_tool("checkout", {"cart": handle}))
        assert kept == {"ordered": {}}
        assert decline.asked == [f"Buy {1 + clients * adds} items: apple x1, pear x30?"]
        accept = answering("accept", {"confirm": True})
        async with as_user(url_a, "alice-token", "legacy", elicitation_callback=accept) as a:
            ordered = structured(await a.call_tool("checkout", {"cart": handle}))
            assert ordered == {"ordered": shown["items"]}
            gone = await a.call_tool("show_cart", {"cart": handle})
            assert "not found or expired" in error_text(gone)


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_round_started_on_one_process_finishes_on_the_other(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'carts.db'}"
    with cart_servers(store, tmp_path) as (url_a, url_b), anyio.fail_after(120):
        for url in (url_a, url_b):
            await wait_listening(int(url.split(":")[2].split("/")[0]))
        async with as_user(url_a, "alice-token", "2026-07-28") as a:
            handle = structured(await a.call_tool("open_cart", {}))["cart"]
            await a.call_tool("add_item", {"cart": handle, "item": "fig", "qty": 3})
        assert await checkout_in_two_rounds(url_a, url_b, handle) == {"ordered": {"fig": 3}}


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
async def test_one_server_with_worker_processes_shares_carts(tmp_path: Path) -> None:
    # `--workers 3`: uvicorn's worker processes on one port, each with its own container,
    # built from the environment the command line set; every connection may land on any.
    store = f"sqlite:///{tmp_path / 'carts.db'}"
    with cart_servers(store, tmp_path, count=1, workers=3) as (url,), anyio.fail_after(120):
        await wait_listening(int(url.split(":")[2].split("/")[0]))
        async with as_user(url, "alice-token", "legacy") as a:
            handle = structured(await a.call_tool("open_cart", {}))["cart"]

        async def shopper(i: int) -> None:
            for _ in range(3):  # a new connection for each call
                async with as_user(url, "alice-token", MODES[i % 2]) as c:
                    result = await c.call_tool("add_item", {"cart": handle, "item": "pear"})
                    assert not result.is_error, result.content

        async with anyio.create_task_group() as group:
            for i in range(6):
                group.start_soon(shopper, i)

        # The workers serve statelessly: a legacy client cannot be asked mid-call, and
        # is told so; the cart is untouched.
        never = answering("cancel")  # declares the capability; the rounds go by hand
        async with as_user(url, "alice-token", "legacy", elicitation_callback=never) as a:
            with pytest.raises(MCPError, match="2026-07-28"):
                await a.call_tool("checkout", {"cart": handle})
            shown = structured(await a.call_tool("show_cart", {"cart": handle}))
        assert shown == {"items": {"pear": 18}}
        assert await checkout_in_two_rounds(url, url, handle) == {"ordered": {"pear": 18}}
        assert never.asked == []


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_cart_server_says_where_it_is() -> None:
    from test_mcp_example import http_server

    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    with http_server(SERVE, env) as url, anyio.fail_after(60):
        await wait_listening(int(url.rsplit(":", 1)[1].split("/")[0]))
        async with Client(url, mode="legacy") as c:
            names = {t.name for t in (await c.list_tools()).tools}
    assert names == {"open_cart", "add_item", "show_cart", "checkout"}
