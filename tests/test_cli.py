"""The ``resolvent graph`` command line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resolvent import InvalidSignature
from resolvent.__main__ import main
from snapshot import assert_snapshot

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _in_tests_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command adds the working directory to sys.path, as a user running it would.
    monkeypatch.chdir(HERE)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text_is_the_plan_description(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "graph", "graph_sample:handler")
    assert code == 0, err
    assert out.startswith("plan for graph_sample.handler(user_id): 3 step(s)")
    assert "graph_sample.settings " in out and "APP" in out and "async generator" in out
    assert "user_id <- call argument 'user_id'" in out
    assert "-> graph_sample.handler" in out


def test_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "graph_sample:handler", "--format", "mermaid")
    assert code == 0
    assert out.startswith("flowchart TD")
    assert 'root(["graph_sample.handler"])' in out
    assert "classDef app" in out


def test_dot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "graph_sample:handler", "--format", "dot")
    assert code == 0
    assert out.startswith("digraph plan {")
    assert out.rstrip().endswith("}")
    assert "pool" in out


def test_explicit_container(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "graph", "graph_sample:handler", "--container", "graph_sample:container"
    )
    assert code == 0
    assert "plan for graph_sample.handler" in out


def test_wrapped_function_uses_the_wrappers_container(capsys: pytest.CaptureFixture[str]) -> None:
    # The module holds two containers; the wrapper names the right one, and the plan
    # is drawn for the wrapped function with its injected parameters.
    code, out, err = run(capsys, "graph", "graph_sample_tools:tool")
    assert code == 0, err
    assert out.startswith("plan for graph_sample_tools.tool(city, user_id)")
    assert "user <- step 3 (graph_sample.current_user)" in out


def test_several_containers_need_a_choice(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "graph", "graph_sample_tools:current_user")
    assert code == 2
    assert "several Container globals (container, other)" in err
    assert "--container" in err


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_invalid_graph_is_drawn_with_the_offending_edge(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    code, out, err = run(capsys, "graph", "graph_sample:broken", "--format", fmt)
    assert code == 1
    assert "captive dependency" in err
    assert "current_user" in out
    red = "linkStyle" if fmt == "mermaid" else 'color="#dc2626"'
    assert out.count(red) == 1  # only the captive edge is highlighted


def test_a_cycle_is_drawn_as_a_closed_loop() -> None:
    from typing import Annotated

    from resolvent import Container, InvalidSignature, Resolve

    async def one(x: int) -> int:
        return x

    async def two(y: int) -> int:
        return y

    async def handler(v: int) -> int:
        return v

    # Set after definition: the two resolvers refer to each other.
    one.__annotations__ = {"x": Annotated[int, Resolve(two)], "return": int}
    two.__annotations__ = {"y": Annotated[int, Resolve(one)], "return": int}
    handler.__annotations__ = {"v": Annotated[int, Resolve(one)], "return": int}

    with pytest.raises(InvalidSignature) as error:
        Container().compile(handler)
    assert [name.rsplit(".", 1)[-1] for name in error.value.path] == [
        "handler",
        "one",
        "two",
        "one",
    ]
    dot = error.value.to_dot()
    assert dot.count('color="#dc2626"') == 2  # one -> two and two -> one
    assert "n2 -> n1" in dot  # the loop closes on the first node of the cycle


# A usage error is one line on stderr, naming what is wrong and how to write it, and
# exit status 2; nothing is printed on stdout.
@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["graph", "graph_sample"],
            "MODULE:FUNCTION must look like module:name, got 'graph_sample'",
        ),
        (
            ["graph", "no_such_module_here:f"],
            "cannot import module 'no_such_module_here': No module named 'no_such_module_here'",
        ),
        (["graph", ":handler"], "MODULE:FUNCTION must look like module:name, got ':handler'"),
        (["graph", "graph_sample:missing"], "module 'graph_sample' has no attribute 'missing'"),
        (
            ["graph", "graph_sample:handler:x"],
            "module 'graph_sample' has no attribute 'handler:x'",
        ),
        (["graph", "graph_sample:Settings.dsn"], "graph_sample:Settings.dsn is not a function"),
        (
            ["graph", "graph_sample:handler", "--container", "graph_sample"],
            "--container must look like module:name, got 'graph_sample'",
        ),
        (
            ["graph", "graph_sample:handler", "--container", "graph_sample:pool"],
            "graph_sample:pool is not a resolvent Container",
        ),
        (
            ["graph", "builtins:len"],
            "module 'builtins' has no Container among its globals; "
            "name one with --container module:name",
        ),
        (
            ["graph", "graph_sample_tools:current_user"],
            "module 'graph_sample_tools' has several Container globals (container, other); "
            "choose one with --container module:name",
        ),
        (
            ["bench", "graph_sample"],
            "MODULE:FUNCTION must look like module:name, got 'graph_sample'",
        ),
        (
            ["bench", "graph_sample:handler", "--arg", "user_id"],
            "--arg must look like NAME=VALUE, got 'user_id'",
        ),
        (
            ["bench", "graph_sample:handler", "--arg", "1d=2"],
            "--arg must look like NAME=VALUE, got '1d=2'",
        ),
        (
            ["bench", "graph_sample:handler", "--override", "graph_sample:pool"],
            "--override must look like module:name=module:name, got 'graph_sample:pool'",
        ),
        (
            ["bench", "graph_sample:handler", "--override", "graph_sample=graph_sample:pool"],
            "--override must look like module:name, got 'graph_sample'",
        ),
        (
            ["bench", "graph_sample:handler", "--override", "graph_sample:pool=graph_sample:a=b"],
            "module 'graph_sample' has no attribute 'a=b'",
        ),
        (["bench", "graph_sample:handler", "--calls", "0"], "--calls must be at least 1"),
        (["bench", "graph_sample:handler", "--seconds", "0"], "--seconds must be positive"),
    ],
)
def test_a_usage_error_is_one_line_and_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out, err) == (2, "", f"resolvent {argv[0]}: error: {line}\n")


# A graph that does not compile: the compile error, whole, on stderr, and exit status 1.
@pytest.mark.parametrize("command", ["graph", "bench"])
def test_a_graph_that_does_not_compile_prints_the_error_and_exits_1(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    import graph_sample

    with pytest.raises(InvalidSignature) as error:
        graph_sample.container.compile(graph_sample.broken)
    code, out, err = run(capsys, command, "graph_sample:broken")
    assert (code, out) == (1, "")
    assert err == f"resolvent {command}: graph_sample:broken does not compile:\n{error.value}\n"


def test_unknown_format_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["graph", "graph_sample:handler", "--format", "svg"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_python_dash_m(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "resolvent", "graph", "graph_sample:handler", "--format", "mermaid"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("flowchart TD")


def test_inject_wrapped_mcp_tool(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("resolvent.mcp")
    code, out, err = run(capsys, "graph", "graph_sample_mcp:lookup")
    assert code == 0, err
    assert out.startswith("plan for graph_sample_mcp.lookup(city)")
    assert "framework value Context" in out


def test_web_route_shows_the_handlers_graph(capsys: pytest.CaptureFixture[str]) -> None:
    # The wrapper the framework sees takes only `resolvent_connection` (FastAPI) or the request
    # (Starlette); the plan is the handler's, with its resolvers.
    pytest.importorskip("fastapi")
    code, out, err = run(capsys, "graph", "graph_sample_web:fastapi_notes")
    assert code == 0, err
    assert out.startswith("plan for graph_sample_web.fastapi_notes(user_id): 2 step(s)")
    assert "graph_sample_web.users " in out and "APP" in out
    assert "user <- step 2 (graph_sample_web.current_user)" in out
    assert "resolvent_connection" not in out
    code, out, err = run(capsys, "graph", "graph_sample_web:starlette_home")
    assert code == 0, err
    assert out.startswith("plan for graph_sample_web.starlette_home(): 1 step(s)")
    assert "request <- framework value Request" in out


@pytest.mark.parametrize(
    ("target", "head", "edge"),
    [
        ("greeting", "greeting(name): 1 step(s)", "rid <- step 1 (graph_sample_mcp.request_id)"),
        ("motto_resource", "motto_resource(): 1 step(s)", "text <- step 1"),
        ("weather", "weather(city): 1 step(s)", "text <- step 1 (graph_sample_mcp.motto)"),
    ],
)
def test_mcp_prompts_and_resources_show_the_handlers_graph(
    capsys: pytest.CaptureFixture[str], target: str, head: str, edge: str
) -> None:
    pytest.importorskip("resolvent.mcp")
    code, out, err = run(capsys, "graph", f"graph_sample_mcp:{target}")
    assert code == 0, err
    assert out.startswith(f"plan for graph_sample_mcp.{head}")
    assert edge in out


# The command line's help is what a user reads first: every option, its argument's name,
# its default and its choices, as `resolvent --help` and each command's `--help` print them.
@pytest.mark.parametrize("argv", [[], ["graph"], ["bench"]], ids=["resolvent", "graph", "bench"])
def test_the_help_of_each_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps the help to the terminal's width
    monkeypatch.setenv("NO_COLOR", "1")  # and colours it on a terminal (Python 3.14)
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    assert_snapshot(f"cli_help_{'_'.join(['resolvent', *argv])}", capsys.readouterr().out)


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(
        "resolvent: error: the following arguments are required: COMMAND\n"
    )


# The container is the one a wrapper holds, however deep in the decorators and however it
# holds it.
@pytest.mark.parametrize(
    ("target", "head"),
    [
        ("graph_sample_tools:logged_tool", "graph_sample_tools.tool(city, user_id): 3 step(s)"),
        ("graph_sample_tools:kept", "graph_sample_tools.kept(city, user_id): 3 step(s)"),
    ],
)
def test_the_container_and_function_behind_the_wrappers(
    capsys: pytest.CaptureFixture[str], target: str, head: str
) -> None:
    code, out, err = run(capsys, "graph", target)
    assert (code, err) == (0, "")
    assert out.startswith(f"plan for {head}")


class _ClosedPipe(io.TextIOWrapper):
    """Standard output piped into `head`, which has exited: writing raises BrokenPipeError."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_output_piped_into_a_reader_that_quit_ends_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `resolvent graph app:fn | head -1`: the command stops with status 0, no traceback, and
    # its standard output goes to the null device, so the interpreter's flush at exit
    # cannot fail again.
    with (tmp_path / "out").open("wb") as file:
        monkeypatch.setattr(sys, "stdout", _ClosedPipe(file))
        assert main(["graph", "graph_sample:handler"]) == 0
        assert os.path.samestat(os.fstat(file.fileno()), os.stat(os.devnull))
    assert capsys.readouterr().err == ""
