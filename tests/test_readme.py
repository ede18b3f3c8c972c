"""The README's examples, saved to files and run the way the README says to run them.

tests/test_docs.py runs the framework-free example in place; here the MCP server runs as its own
process over stdio and is driven by the MCP SDK's client, and `resolvent graph` reads the
framework-free example without running it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from mcp_helpers import ACROSS_PROCESSES, Script, text

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
# CI also runs this file against the installed wheel (RESOLVENT_TEST_INSTALLED): then the
# subprocesses do not see the source tree either.
SOURCE = [] if os.environ.get("RESOLVENT_TEST_INSTALLED") else [str(ROOT / "src")]
ENV = {"PYTHONPATH": os.pathsep.join(SOURCE)}


def block(marker: str) -> str:
    [found] = [b for b in BLOCKS if marker in b]
    return found


def test_the_readme_opens_with_the_two_commands() -> None:
    first_block = README.split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    assert README.index("```") < README.index("## Install") < README.index("## An MCP server")


def test_every_readme_example_is_guarded() -> None:
    for code in BLOCKS:
        assert '\nif __name__ == "__main__":\n' in code, code[:200]


@ACROSS_PROCESSES
async def test_readme_mcp_server_over_stdio(tmp_path: Path, mode: str) -> None:
    (tmp_path / "server.py").write_text(block("MCPServer"), encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable, args=["server.py"], cwd=tmp_path, env=ENV
    )
    script = Script(
        **{
            "Delete 'call mum'?": ("accept", {"ok": True}),
            "Delete 'buy milk'?": ("decline", None),
        }
    )
    with anyio.fail_after(60):
        async with Client(params, mode=mode, elicitation_callback=script) as client:
            [tool] = (await client.list_tools()).tools
            assert tool.name == "delete_note"
            assert list(tool.input_schema["properties"]) == ["index"]  # db, answer: hidden

            done = await client.call_tool("delete_note", {"index": 1})
            assert text(done) == "deleted 'call mum'"
            declined = await client.call_tool("delete_note", {"index": 0})
            assert declined.is_error
            assert "'answer'" in text(declined) and "declined" in text(declined)
    assert script.asked == ["Delete 'call mum'?", "Delete 'buy milk'?"]


def test_readme_core_example_runs_as_a_script(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(block("def greet"), encoding="utf-8")
    env = {**os.environ, **ENV}
    run = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    assert run.stdout == "Hello, Ada!\n"
    # `resolvent graph` imports the module: the guard keeps the example's output out of it.
    graph = subprocess.run(
        [sys.executable, "-m", "resolvent", "graph", "app:greet", "--format", "mermaid"],
        cwd=tmp_path, env={**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), *SOURCE])},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "Hello" not in graph.stdout
    assert "current_user" in graph.stdout and "users" in graph.stdout


def test_the_install_lists_name_every_extra_a_user_may_want() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    developers = {"test", "lint", "docs", "bench", "mutate", "dev"}  # dev.py's, not users'
    for_users = set(extras) - developers
    assert {"mcp", "starlette", "fastapi", "trio", "redis", "plot", "otel"} <= for_users
    for page in (README, (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")):
        listed = set(re.findall(r'pip install "\.\[(\w+)\]"', page))
        assert for_users <= listed, for_users - listed
