"""What a user reads when a program stops on a resolvent error: the public name of the
exception (``resolvent.InvalidSignature``, where it is imported from, not the private
module that defines it), on the last line of a real traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resolvent

ROOT = Path(__file__).resolve().parent.parent


def stderr_of(code: str, cwd: Path) -> list[str]:
    """The lines a script that fails prints on stderr, run in a fresh interpreter."""
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    return proc.stderr.splitlines()


def test_a_traceback_names_the_public_exception(tmp_path: Path) -> None:
    lines = stderr_of(
        """
        from typing import Annotated

        from resolvent import Container, Resolve

        def handler(user: Annotated[str, Resolve()]) -> str:  # no provider offers a str
            return user

        Container().compile(handler)
        """,
        tmp_path,
    )
    assert lines[0] == "Traceback (most recent call last):"
    last = next(i for i, line in enumerate(lines) if line.startswith("resolvent."))
    assert lines[last].startswith("resolvent.InvalidSignature: ")
    assert "_errors" not in "\n".join(lines[last:])


def test_every_public_exception_is_named_where_it_is_imported_from() -> None:
    errors = [
        getattr(resolvent, name)
        for name in resolvent.__all__
        if isinstance(getattr(resolvent, name), type)
        and issubclass(getattr(resolvent, name), BaseException)
    ]
    assert len(errors) >= 8
    for error in errors:
        assert error.__module__ == "resolvent", error
        assert getattr(resolvent, error.__qualname__) is error  # what pickle looks up


# -- a stdio server that cannot start ----------------------------------------------------
# Its start runs inside the SDK's task group: uncaught, the error would come out inside an
# exception group, some 60 lines of the SDK's and anyio's frames around the one that matters.

FORGOT_INJECT = """
from typing import Annotated

from mcp.server.mcpserver import MCPServer

from resolvent import Container, Resolve, Scope

container = Container()
server = MCPServer("notes", lifespan=container.lifespan)


@container.provider(scope=Scope.APP)
async def notes() -> list[str]:
    return ["buy milk"]


@server.tool()  # no @inject(container)
async def count(db: Annotated[list[str], Resolve(notes)]) -> int:
    return len(db)


server.run()
"""


def stdio_server(code: str, cwd: Path, *options: str) -> list[str]:
    """What a stdio server that fails to start prints on stderr, run as a user would."""
    pytest.importorskip("mcp", reason="runs an MCP server: needs the mcp extra")
    (cwd / "server.py").write_text(code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, *options, "server.py"],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    return proc.stderr.splitlines()


def test_a_forgotten_inject_over_stdio_is_said_in_a_few_lines(tmp_path: Path) -> None:
    lines = stdio_server(FORGOT_INJECT, tmp_path)
    assert lines == [
        "resolvent: the server did not start (python -X dev shows the whole traceback):",
        "resolvent.InvalidSignature: MCP server 'notes': tool 'count' (count) has resolver "
        "markers on 'db' but was registered without @inject, so the client would be asked "
        "for them as arguments.",
        "  fix: put @inject(container) directly under @server.tool():",
        "      @server.tool()",
        "      @inject(container)",
        "      def count(...): ...",
    ]


def test_python_dev_mode_shows_the_whole_traceback(tmp_path: Path) -> None:
    text = "\n".join(stdio_server(FORGOT_INJECT, tmp_path, "-X", "dev"))
    assert "ExceptionGroup" in text and "Traceback" in text
    assert "resolvent.InvalidSignature: MCP server 'notes'" in text


def test_a_store_that_cannot_open_ends_on_one_line_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no-such-folder/state.db"
    lines = stdio_server(
        f"""
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from resolvent import Container, State


class Cart(BaseModel):
    items: list[str] = []


carts = State("cart", Cart, store={url!r})
container = Container(warm=[carts.store])
MCPServer("shop", lifespan=container.lifespan).run()
""",
        tmp_path,
    )
    assert "Traceback (most recent call last):" not in lines
    assert lines[-1].startswith(f"resolvent.open_store({url!r}) (Scope.APP) failed to start: ")
    assert lines[-1].endswith(": unable to open database file.")
    assert sum("unable to open database file" in line for line in lines) == 1  # said once
