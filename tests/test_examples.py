"""The examples run as-is and print what their docs promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no warnings, no log noise
    return proc.stdout


def test_mcp_demo() -> None:
    pytest.importorskip("mcp", reason="the demo is an MCP server: needs the mcp extra")
    out = run_example("demo.py")
    lines = out.splitlines()
    # The tool list: the schema shows only caller-facing parameters; injected ones are named
    # as hidden, with their scopes.
    tools = {line.split("(")[0].strip(): line for line in lines if "injected, hidden" in line}
    assert tools.keys() == {"add_note", "list_notes", "delete_note"}
    assert tools["add_note"].split()[0] == "add_note(text)"
    assert tools["add_note"].endswith("hidden from the client: tx (CALL), author (SESSION)")
    assert tools["list_notes"].split()[0] == "list_notes()"
    assert tools["list_notes"].endswith("hidden from the client: db (APP)")
    assert tools["delete_note"].split()[0] == "delete_note(note_id)"
    assert tools["delete_note"].endswith("hidden from the client: answer (CALL), tx (CALL)")
    # Scopes: one APP database, one SESSION writer for the connection, a CALL transaction
    # per tools/call (per round on 2026-07-28).
    assert out.count("APP      database opened") == 1
    assert out.count("SESSION  writer-1 signed in") == 1
    assert "< note 3 'water plants' by writer-1" in out
    assert out.count("CALL     transaction begun") == 7
    assert out.count("CALL     transaction committed") == 7
    # Legacy: the question is a standalone request inside one tools/call.
    assert "legacy connection (2025-11-25)" in out
    assert '''client   < elicitation/create "Delete note 2: 'call mum'?"''' in out
    assert "the client sent 1 tools/call request;" in out
    # 2026-07-28: an InputRequiredResult round, then a retry carrying the answer.
    assert "== confirmation, 2026-07-28: InputRequiredResult, then a retry" in out
    assert '''client   < InputRequiredResult "Delete note 3: 'water plants'?"''' in out
    assert "[round 2]" in out
    assert "[round 3]" not in out
    assert "the client sent 2 tools/call requests" in out
    # The server says what happened once, in the round that completes the call, though
    # the resolver that asks runs in both rounds.
    rounds = out[out.index("[round 1]") : out.index("the client sent 2 tools/call requests")]
    server = [line.split(None, 1)[1] for line in rounds.splitlines() if " server " in line]
    assert server == ["note 3 deleted: the user said yes"]
    # A note that is not there is refused before anyone is asked about it.
    assert "there is no note 9, nothing to ask" in out
    assert (
        "Delete note 9" not in out
        and "error: Error executing tool delete_note: there is no note 9" in out
    )
    assert out.count("< deleted note") == 2
    # A declined question reaches the tool as a value; the note stays.
    decline = out.index("client   > decline")
    assert out.index("client   < kept note 1", decline) > decline
    assert "client   < notes: 1 'buy milk'" in out
    # Teardown: the last CALL, then the SESSION at disconnect, then the APP at shutdown.
    committed = out.rindex("transaction committed")
    signed_out = out.index("SESSION  writer-1 signed out")
    closed = out.index("APP      database closed")
    assert committed < out.index("client   disconnects") < signed_out
    assert signed_out < out.index("server   shuts down") < closed
    assert lines[-1] == "done"
    assert "Traceback" not in out


def test_core_demo() -> None:
    out = run_example("core_demo.py")
    # The plan, described.
    assert "plan for book_table(guests): 5 step(s)" in out
    assert "news <- step 3 (newsletter) as outcome" in out
    # Call 1: a scripted user confirms and declines the newsletter; the call commits.
    assert "user      accept Confirm(confirm=True, name='Ada')" in out
    assert "table for 2 booked for Ada; no newsletter" in out
    assert "commit ['Ada x2']" in out
    # Call 2: a declined booking reaches the caller; the transaction saw the error.
    assert "roll back (NotAccepted)" in out
    assert "NotAccepted: parameter 'answer' of book_table" in out
    # The APP resource opens once, lazily, and closes last.
    assert out.count("open the booking book") == 1
    lines = out.splitlines()
    assert lines[-2].strip() == "app       close the booking book (1 booking(s))"
    assert lines[-1] == "done"
    # Teardown order inside call 1: the result is produced before the commit.
    assert out.index("booked for Ada") < out.index("commit ['Ada x2']")


def test_notes_cli_reuses_the_server_providers_without_mcp() -> None:
    out = run_example("notes_cli.py", "--yes", "buy milk", "call mum")
    assert "added note 1 'buy milk' by writer-1" in out
    assert "added note 2 'call mum' by writer-1" in out  # one SESSION for the whole run
    assert "deleted note 1" in out
    assert out.rstrip().endswith("2. call mum (writer-1)")


def test_plain_anyio_on_both_backends() -> None:
    out = run_example("plain_anyio.py")
    asyncio_part, _, trio_part = out.partition("== trio")
    assert asyncio_part.startswith("== asyncio")
    for part in (asyncio_part, trio_part):
        assert "#3 ada: total 7" in part
        assert "error: pear is sold out" in part
        # The failed request's resource was still torn down.
        assert "call: request 4 finished" in part
        assert "session: cart 1 closed with ['apple', 'pear']" in part
        assert "session: cart 2 closed with ['fig']" in part
        # The session closes before the next one opens; the APP scope closes last.
        assert part.index("cart 1 closed") < part.index("cart 2 opened")
        assert part.index("cart 2 closed") < part.index("stock service down")
        assert part.count("stock service up") == 1
        assert "2. cart        SESSION async generator" in part


def without(module: str, example: str) -> subprocess.CompletedProcess[str]:
    """Run *example* as if *module* were not installed."""
    code = (
        f"import runpy, sys; sys.modules[{module!r}] = None;"
        f" runpy.run_path({str(EXAMPLES / example)!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_plain_anyio_without_trio_says_what_to_install() -> None:
    proc = without("trio", "plain_anyio.py")
    assert proc.returncode == 0, proc.stderr
    asyncio_part, _, trio_part = proc.stdout.partition("== trio")
    assert "#3 ada: total 7" in asyncio_part
    assert trio_part.strip() == 'trio is not installed: pip install ".[trio]" runs this part too'
    assert "LookupError" not in proc.stderr


def test_mcp_examples_without_the_sdk_say_what_to_install() -> None:
    for example in ("demo.py", "gateway_server.py"):
        proc = without("mcp", example)
        assert proc.returncode == 1
        assert proc.stderr.strip().endswith('pip install ".[mcp]" (or run python3 dev.py demo).')
        assert "Traceback" not in proc.stderr
