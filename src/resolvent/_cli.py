"""The ``resolvent`` command line: ``resolvent graph module:function``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, TextIO

from ._container import Container
from ._errors import InvalidSignature
from ._markers import HANDLER

__all__ = ("main",)

_FORMATS = ("text", "mermaid", "dot")


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
    if args.command == "graph":
        try:
            return _graph(args, sys.stdout, sys.stderr)
        except BrokenPipeError:  # piped into `head` or similar: stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover
