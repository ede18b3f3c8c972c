"""The adapter over streamable HTTP on 127.0.0.1: sessions, APP lifetime, stateless workers.

Loopback only, every wait bounded by anyio.fail_after, every server stopped by the test.
"""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from mcp_helpers import answering, free_port, run_uvicorn, text, wait_listening
from mcp_http_server import build
from reliability_figures import record

pytestmark = pytest.mark.network

SERVER_SCRIPT = Path(__file__).with_name("mcp_http_server.py")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # uvicorn's server loop runs on asyncio only, so the in-process HTTP server pins this module.
    return "asyncio"


async def wait_for(events: list[str], item: str) -> None:
    with anyio.fail_after(5):
        while item not in events:
            await anyio.sleep(0.02)


async def test_stateful_http_sessions_app_and_legacy_elicitation() -> None:
    events: list[str] = []
    server = build(events)
    with anyio.fail_after(30):
        async with run_uvicorn(server.streamable_http_app()) as url:
            callback = answering("accept", {"name": "Ada"})
            async with Client(url, mode="legacy", elicitation_callback=callback) as two:
                async with Client(url, mode="legacy") as one:
                    a1 = text(await one.call_tool("whoami", {}))
                    b1 = text(await two.call_tool("whoami", {}))
                    assert a1 == text(await one.call_tool("whoami", {}))
                    assert a1 != b1
                # Closing the first MCP session tears down its SESSION values only.
                await wait_for(events, "visitor 1 close")
                assert "visitor 2 close" not in events
                greeted = await two.call_tool("greet", {"greeting": "Hi"})
                assert text(greeted).startswith("Hi Ada")
                assert callback.asked == ["Your name?"]
            await wait_for(events, "visitor 2 close")
            assert "pool close" not in events
        # The APP scope opened once for every session and closed at shutdown.
    assert events.count("pool open") == 1
    assert events[-1] == "pool close"


async def test_modern_http_elicitation_rounds() -> None:
    events: list[str] = []
    server = build(events)
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    with anyio.fail_after(30):
        async with run_uvicorn(app) as url:
            callback = answering("accept", {"name": "Ada"})
            async with Client(url, mode="2026-07-28", elicitation_callback=callback) as c:
                result = await c.call_tool("greet", {"greeting": "Hello"})
    assert text(result).startswith("Hello Ada")
    assert callback.asked == ["Your name?"]
    assert events.count(f"ask in {os.getpid()}") == 2  # round 1 asks; round 2 runs it again


@pytest.mark.parametrize("json_response", [False, True])
async def test_a_legacy_question_on_a_stateless_server_is_a_clear_error(
    json_response: bool,
) -> None:
    # Stateless HTTP (what several workers behind one port need) has no channel back to
    # a legacy client mid-call: the error names the resolver and the ways out, the
    # resource opened before the question closes, and the server goes on serving.
    events: list[str] = []
    server = build(events)
    app = server.streamable_http_app(stateless_http=True, json_response=json_response)
    with anyio.fail_after(30):
        async with run_uvicorn(app) as url:
            callback = answering("accept", {"name": "Ada"})
            async with Client(url, mode="legacy", elicitation_callback=callback) as c:
                with pytest.raises(MCPError) as caught:
                    await c.call_tool("sign", {})
                assert text(await c.call_tool("whoami", {})).startswith("visitor-")
            async with Client(url, mode="2026-07-28", elicitation_callback=callback) as c:
                assert text(await c.call_tool("sign", {})) == "Ada signed tx"
    message = caught.value.error.message
    assert caught.value.error.code == types.INVALID_REQUEST
    assert "ask_name (for parameter 'name') asks the client ('elicitation/create')" in message
    assert "stateful HTTP" in message and "2026-07-28" in message
    assert callback.asked == ["Your name?"]  # only the 2026-07-28 client was asked
    assert events.count("transaction open") == events.count("transaction close") >= 2


async def test_two_stateless_processes_serve_the_rounds_of_one_call() -> None:
    key = secrets.token_bytes(32).hex()
    ports = [free_port(), free_port()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), str(port), key],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        with anyio.fail_after(60):
            for port in ports:
                await wait_listening(port)
            url_a, url_b = (f"http://127.0.0.1:{port}/mcp" for port in ports)
            args = {"greeting": "Hello"}
            # Round 1 on worker A.
            async with Client(
                url_a, mode="2026-07-28", elicitation_callback=answering("cancel")
            ) as a:
                first = await a.session.call_tool("greet", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.input_requests is not None
            (wire_key,) = first.input_requests
            # The retry lands on worker B, which kept nothing from round 1.
            answer = types.ElicitResult(action="accept", content={"name": "Ada"})
            async with Client(
                url_b, mode="2026-07-28", elicitation_callback=answering("cancel")
            ) as b:
                done = await b.call_tool(
                    "greet",
                    args,
                    input_responses={wire_key: answer},
                    request_state=first.request_state,
                )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert not done.is_error, text(done)
    assert text(done) == f"Hello Ada (pid {procs[1].pid})"


async def test_parallel_http_sessions_are_isolated_and_each_closes_its_own() -> None:
    sessions = 6
    events: list[str] = []
    server = build(events)
    seen: dict[int, list[str]] = {}
    first_calls = 0
    all_open = anyio.Event()

    async def one_session(url: str, i: int) -> None:
        nonlocal first_calls
        async with Client(url, mode="legacy") as c:
            values = [text(await c.call_tool("whoami", {}))]
            first_calls += 1
            if first_calls == sessions:
                all_open.set()
            await all_open.wait()  # every session is live before any makes its next calls
            assert not any("close" in event for event in events)

            async def call() -> None:
                values.append(text(await c.call_tool("whoami", {})))

            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(call)
            seen[i] = values

    with anyio.fail_after(60):
        async with run_uvicorn(server.streamable_http_app()) as url:
            async with anyio.create_task_group() as group:
                for i in range(sessions):
                    group.start_soon(one_session, url, i)
            for n in range(1, sessions + 1):
                await wait_for(events, f"visitor {n} close")
            assert "pool close" not in events
    # Each session saw one SESSION value of its own, in all five calls.
    per_session = [set(values) for values in seen.values()]
    assert all(len(values) == 1 for values in per_session)
    assert all(len(values) == 5 for values in seen.values())
    assert len(set().union(*per_session)) == sessions
    assert events.count("pool open") == 1 and events[-1] == "pool close"
    opened = [e for e in events if e.startswith("visitor") and e.endswith("open")]
    closed = [e for e in events if e.startswith("visitor") and e.endswith("close")]
    assert len(opened) == len(closed) == sessions
    record(
        "http parallel sessions",
        {
            "sessions": sessions,
            "calls": 5 * sessions,
            "resources_leaked": len(opened) - len(closed),
        },
    )


async def test_more_http_sessions_than_max_sessions_keep_their_values() -> None:
    # Stateful streamable HTTP: each client is one MCP session (one connection). The
    # transport bounds those; resolvent's max_sessions does not evict a live one's values.
    events: list[str] = []
    server = build(events, max_sessions=1)
    with anyio.fail_after(60):
        async with run_uvicorn(server.streamable_http_app()) as url:
            async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
                async with Client(url, mode="legacy") as c:
                    first = [text(await x.call_tool("whoami", {})) for x in (a, b, c)]
                    for _ in range(5):
                        again = [text(await x.call_tool("whoami", {})) for x in (a, b, c)]
                        assert again == first
                    assert len(set(first)) == 3
                    assert not any(e.endswith("close") for e in events)
                await wait_for(events, "visitor 3 close")  # c's session ended with c
                assert [e for e in events if e.endswith("close")] == ["visitor 3 close"]
            await wait_for(events, "visitor 1 close")
            await wait_for(events, "visitor 2 close")
    assert sorted(e for e in events if e.startswith("visitor")) == [
        f"visitor {n} {what}" for n in (1, 2, 3) for what in ("close", "open")
    ]
