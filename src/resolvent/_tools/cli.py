"""The ``resolvent`` command line: ``resolvent graph`` and ``resolvent bench``."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, TextIO

from .. import Container, InvalidSignature, Plan
from .._integration import HANDLER
from .bench import MODES

__all__ = ("main",)

_FORMATS = ("text", "mermaid", "dot")
_TRACES_HELP = (
    "a trace file of the function's calls (OTLP JSON, as the OpenTelemetry Collector's file "
    "exporter writes it, or the SDK console exporter's JSON): show each resolver's time "
    "in that traffic"
)


class UsageError(Exception):
    """The command line names something that cannot be found or used."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="resolvent",
        description="Tools for resolvent containers.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    graph = commands.add_parser(
        "graph",
        help="compile a function's dependency graph and print its plan",
        description=(
            "Import MODULE, compile FUNCTION's dependency graph in its container and print "
            "the plan as text, Mermaid or Graphviz DOT. Exits with status 1 if the graph "
            "does not compile."
        ),
    )
    graph.add_argument(
        "target",
        metavar="MODULE:FUNCTION",
        help="the function to draw, e.g. app.tools:book; an MCP tool, prompt or resource "
        "or a web route wrapped with inject(container) draws the function it wraps",
    )
    graph.add_argument(
        "--container",
        metavar="MODULE:NAME",
        help="the Container to compile in (default: the container the function is wrapped "
        "with, else the single Container instance among the module's globals)",
    )
    graph.add_argument(
        "--format",
        choices=_FORMATS,
        default="text",
        help="output format (default: text)",
    )
    graph.add_argument("--traces", metavar="FILE", help=_TRACES_HELP)
    bench = commands.add_parser(
        "bench",
        help="time a function's resolution and body, split into your code and resolvent's",
        description=(
            "Import MODULE, compile FUNCTION as `resolvent graph` does, open its container "
            "and call it repeatedly: report calls per second, the time per call split into "
            "your code (resolvers, resource set-up and teardown, the body) and resolvent's "
            "own overhead, and each resolver's runs per call, mean and p99. APP and SESSION "
            "values start once, before the timing. Exits with status 1 if the function "
            "cannot be benchmarked (the error says why and how to fix it)."
        ),
    )
    bench.add_argument("target", metavar="MODULE:FUNCTION", help="the function to time")
    bench.add_argument(
        "--container",
        metavar="MODULE:NAME",
        help="the Container to run in (found as for `resolvent graph`)",
    )
    bench.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a call argument; VALUE is a Python literal (42, 'x', [1, 2]), else a string",
    )
    bench.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="MODULE:NAME=MODULE:NAME",
        help="replace a provider (function or provided type) for the run, as "
        "container.override does, e.g. to stand in for a resolver that needs the MCP "
        "Context or asks a question",
    )
    amount = bench.add_mutually_exclusive_group()
    amount.add_argument("--calls", type=int, metavar="N", help="timed calls per mode")
    amount.add_argument(
        "--seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="time to spend per mode (default: 2)",
    )
    bench.add_argument(
        "--mode",
        choices=(*MODES, "all"),
        default="generated",
        help="how calls run: generated code (container.run), the interpreter (a call "
        "scope in multi-round mode), concurrent branches, or all three side by side "
        "(default: generated)",
    )
    bench.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the event loop to run on, as your server does (default: asyncio)",
    )
    bench.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    bench.add_argument("--traces", metavar="FILE", help=_TRACES_HELP + ", beside the bench's")
    bench.add_argument(
        "--plot", metavar="FILE.png", help="draw the time per resolver (needs matplotlib)"
    )
    return parser


def _split(spec: str, what: str) -> tuple[str, str]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise UsageError(f"{what} must look like module:name, got {spec!r}")
    return module, name


def _import(module: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"cannot import module {module!r}: {exc}") from exc


def _lookup(module: ModuleType, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"module {module.__name__!r} has no attribute {dotted!r}") from None
    return obj


def _wrapper_chain(fn: Any) -> Iterator[Any]:
    """*fn*, then each function it wraps (``__wrapped__``), outermost first."""
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        yield fn
        fn = getattr(fn, "__wrapped__", None)


def _attached_container(fn: Any) -> Container | None:
    """A container a wrapper (such as ``@inject(container)``) holds on to, if any."""
    for layer in _wrapper_chain(fn):
        attrs: dict[str, Any] = getattr(layer, "__dict__", {})
        cells = getattr(layer, "__closure__", None) or ()
        candidates = list(attrs.values())
        for cell in cells:
            try:
                candidates.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        # A wrapper may hold a bound method of an object that holds the container.
        owners = [getattr(value, "__self__", None) for value in candidates]
        candidates += [v for owner in owners for v in getattr(owner, "__dict__", {}).values()]
        for value in candidates:
            if isinstance(value, Container):
                return value
    return None


def _module_container(module: ModuleType) -> Container:
    found = {name: value for name, value in vars(module).items() if isinstance(value, Container)}
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise UsageError(
            f"module {module.__name__!r} has no Container among its globals; "
            "name one with --container module:name"
        )
    names = ", ".join(sorted(found))
    raise UsageError(
        f"module {module.__name__!r} has several Container globals ({names}); "
        "choose one with --container module:name"
    )


def _find(target: str, container_spec: str | None) -> tuple[Callable[..., Any], Container]:
    module_name, fn_name = _split(target, "MODULE:FUNCTION")
    module = _import(module_name)
    fn = _lookup(module, fn_name)
    if not callable(fn):
        raise UsageError(f"{target} is not a function")
    if container_spec is not None:
        c_module, c_name = _split(container_spec, "--container")
        container = _lookup(_import(c_module), c_name)
        if not isinstance(container, Container):
            raise UsageError(f"{container_spec} is not a resolvent Container")
    else:
        container = _attached_container(fn) or _module_container(module)
    return handler_of(fn), container


def handler_of(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose plan *fn* runs: an integration's wrapper shows the framework only
    the caller-facing parameters (an MCP tool, prompt or resource under
    ``resolvent.mcp.inject``, a web route under ``resolvent.starlette.inject``), so the
    plan belongs to the function it wraps."""
    seen: set[int] = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, HANDLER, None)
        if inner is None:
            inner = getattr(fn, "__wrapped__", None)
        if inner is None or not callable(inner):
            break
        fn = inner
    return fn


def _graph(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        fn, container = _find(args.target, args.container)
    except UsageError as exc:
        print(f"resolvent graph: error: {exc}", file=err)
        return 2
    try:
        plan = container.compile(fn)
    except InvalidSignature as exc:
        print(f"resolvent graph: {args.target} does not compile:\n{exc}", file=err)
        if exc.path and args.format in ("mermaid", "dot"):
            print(exc.to_mermaid() if args.format == "mermaid" else exc.to_dot(), file=out)
        return 1
    if args.format == "mermaid":
        print(plan.to_mermaid(), file=out)
    elif args.format == "dot":
        print(plan.to_dot(), file=out)
    else:
        print(plan.describe(), file=out)
    if args.traces:
        return _traffic("graph", args.traces, plan, None, out, err)
    return 0


def _traffic(
    command: str,
    path: str,
    plan: Plan,
    bench: dict[str, float] | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """Print each resolver's time in the calls of *plan*'s function that the trace file
    at *path* holds (and *bench*'s mean of each, µs, if given); 1 if it holds none."""
    from .trace_file import TraceFileError, read_spans, render_traffic, traffic

    try:
        found = traffic(read_spans(path), plan.name, path)
    except TraceFileError as exc:
        print(f"resolvent {command}: {exc}", file=err)
        return 1
    order = [(step.name, step.scope.name) for step in plan.steps]
    print("", file=out)
    print(render_traffic(found, order, path, bench), file=out)
    return 0


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _bench_args(args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[Any, Any]]]:
    values: dict[str, Any] = {}
    for item in args.arg:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--arg must look like NAME=VALUE, got {item!r}")
        values[name] = _value(text)
    overrides: list[tuple[Any, Any]] = []
    for item in args.override:
        left, sep, right = item.partition("=")
        if not sep:
            raise UsageError(f"--override must look like module:name=module:name, got {item!r}")
        pair: list[Any] = []
        for spec in (left, right):
            module, name = _split(spec, "--override")
            pair.append(_lookup(_import(module), name))
        overrides.append((pair[0], pair[1]))
    if args.calls is not None and args.calls < 1:
        raise UsageError("--calls must be at least 1")
    if args.calls is None and args.seconds <= 0:
        raise UsageError("--seconds must be positive")
    return values, overrides


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import anyio

    from . import bench
    from .bench_report import plot, pyplot, render

    try:
        fn, container = _find(args.target, args.container)
        values, overrides = _bench_args(args)
    except UsageError as exc:
        print(f"resolvent bench: error: {exc}", file=err)
        return 2
    if args.plot:
        try:
            pyplot()
        except bench.BenchError as exc:
            print(f"resolvent bench: {exc}", file=err)
            return 2
    modes = bench.MODES if args.mode == "all" else (args.mode,)

    async def run() -> dict[str, Any]:
        return await bench.bench(
            container,
            fn,
            args.target,
            args=values,
            overrides=overrides,
            modes=modes,
            calls=args.calls,
            seconds=args.seconds,
            progress=err,
        )

    try:
        report = anyio.run(run, backend=args.backend)
    except InvalidSignature as exc:
        print(f"resolvent bench: {args.target} does not compile:\n{exc}", file=err)
        return 1
    except bench.BenchError as exc:
        print(f"resolvent bench: cannot benchmark {args.target}:\n{exc}", file=err)
        return 1
    print(render(report), file=out)
    if args.traces:
        rows = report["modes"][0]["resolvers"]
        measured = {r["name"]: r["mean_us"] for r in rows if r["runs_per_call"]}
        status = _traffic("bench", args.traces, container.compile(fn), measured, out, err)
        if status:
            return status
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=2, default=repr)
        print(f"figures written to {args.json}", file=err)
    if args.plot:
        try:
            plot(report, args.plot)
        except bench.BenchError as exc:
            print(f"resolvent bench: {exc}", file=err)
            return 1
        print(f"plot written to {args.plot}", file=err)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``resolvent`` command line and return its exit status.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 if the graph does not compile (the error is printed to stderr),
        2 for a usage error.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in ("graph", "bench"):
        command = _graph if args.command == "graph" else _bench
        try:
            return command(args, sys.stdout, sys.stderr)
        except BrokenPipeError:  # piped into `head` or similar: stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover
