"""The MCP start-up guard: handlers that carry resolver markers but were registered without
`inject`, whose internal parameters would otherwise become client-facing arguments.

`check_server` walks an `MCPServer`'s tools, prompts, resources and resource templates;
``container.lifespan`` and ``container.wrap_lifespan`` run it when an `MCPServer` starts,
whether or not the server's module imported `resolvent.mcp`. It lives beside the container's
start-up, which imports it, not in `resolvent.mcp`: importing a module of
`resolvent.mcp` runs that package, which imports the container. It imports the MCP SDK,
and is imported only once an SDK server exists (by the start-up) or by `resolvent.mcp`.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Resolve as SdkResolve

from .._reading.params import RESOLVE_MARKERS
from .._vocabulary.errors import InvalidSignature
from .._vocabulary.markers import INJECTED

__all__ = ("check_if_server", "check_server")


def _handlers(server: MCPServer[Any]) -> Iterator[tuple[str, str, str, Callable[..., Any]]]:
    """(kind, decorator, name, function) for every function-backed handler of *server*."""
    # The SDK's managers are private; kept to this one function (a test fails if they move).
    for tool in server._tool_manager.list_tools():  # pyright: ignore[reportPrivateUsage]
        yield "tool", "@server.tool()", tool.name, tool.fn
    for prompt in server._prompt_manager.list_prompts():  # pyright: ignore[reportPrivateUsage]
        yield "prompt", "@server.prompt()", prompt.name, prompt.fn
    resources = server._resource_manager  # pyright: ignore[reportPrivateUsage]
    for template in resources.list_templates():
        uri = template.uri_template
        yield "resource template", f'@server.resource("{uri}")', uri, template.fn
    for resource in resources.list_resources():
        fn = getattr(resource, "fn", None)
        if callable(fn):
            uri = str(resource.uri)
            yield "resource", f'@server.resource("{uri}")', uri, fn


def _marked(fn: Callable[..., Any], kind: str) -> list[str]:
    """The parameters of *fn* that carry a resolver marker only `inject` would read."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # the SDK reads them too; what it cannot read is its own error
        return []
    names: list[str] = []
    for name, hint in hints.items():
        if name == "return" or typing.get_origin(hint) is not typing.Annotated:
            continue
        for meta in hint.__metadata__:
            # The SDK's marker counts whether or not `resolvent.mcp` registered it yet.
            if not isinstance(meta, (*RESOLVE_MARKERS, SdkResolve)):
                continue
            # The SDK answers its own markers on tools; nowhere else.
            if kind == "tool" and isinstance(meta, SdkResolve):
                continue
            names.append(name)
            break
    return names


def check_server(server: MCPServer[Any]) -> None:
    """Refuse handlers that use resolver markers but were registered without `inject`.

    ``MCPServer(..., lifespan=container.lifespan)`` calls it when the server starts; call
    it yourself (after registering every handler) to fail earlier, in a test for instance.

    Raises:
        InvalidSignature: naming each such handler, its marked parameters and the fix.
    """
    problems: list[str] = []
    for kind, decorator, name, fn in _handlers(server):
        if getattr(fn, INJECTED, False):
            continue
        marked = _marked(fn, kind)
        if marked:
            shown = ", ".join(repr(p) for p in marked)
            qualname = getattr(fn, "__qualname__", repr(fn))
            problems.append(
                f"{kind} {name!r} ({qualname}) has resolver markers on {shown} but was "
                f"registered without @inject, so the client would be asked for them as "
                f"arguments.\n  fix: put @inject(container) directly under {decorator}:\n"
                f"      {decorator}\n      @inject(container)\n"
                f"      def {getattr(fn, '__name__', name)}(...): ..."
            )
    if problems:
        raise InvalidSignature(
            f"MCP server {server.name!r}: " + "\n".join(problems)
            if len(problems) == 1
            else f"MCP server {server.name!r}:\n" + "\n".join(problems)
        )


def check_if_server(server: Any) -> None:
    """The lifespan hook: check *server* when it is an `MCPServer`."""
    if isinstance(server, MCPServer):
        check_server(server)  # pyright: ignore[reportUnknownArgumentType]
