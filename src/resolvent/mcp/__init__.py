"""resolvent for MCP servers: dependency injection in MCPServer tools.

```python
from mcp.server.mcpserver import Context, MCPServer
from resolvent import Container, Resolve
from resolvent.mcp import inject

container = Container()
server = MCPServer("notes", lifespan=container.lifespan)

@server.tool()
@inject(container)
async def add_note(text: str, db: Annotated[Db, Resolve(open_db)], ctx: Context) -> str: ...
```

Scopes map onto MCP: CALL is one ``tools/call`` (one round of it on 2026-07-28), SESSION
is one MCP connection (or a key you choose where the protocol has no sessions), APP is the
server lifespan. A resolver returning `resolvent.Elicit` (or the SDK's ``Elicit``),
`Sample` or `ListRoots` is answered over whichever protocol the client negotiated. Tools
written for the SDK's built-in resolvers (``mcp.server.mcpserver.resolve``) work unchanged
under `inject`, and consumers annotated with the SDK's outcome types receive them.

When the server starts, ``container.lifespan`` refuses a handler that carries resolver
markers but was registered without `inject` (`check_server` runs the same check on demand).
"""

from mcp.server.mcpserver.resolve import ListRoots, Sample

from .._container.mcp_guard import check_if_server, check_server
from .._integration import register_start_check
from .._state import add_principal_source
from ._principal import authenticated_principal
from ._tool import inject  # importing it registers the SDK's markers with the core

register_start_check(check_if_server)  # container.lifespan refuses un-injected handlers
add_principal_source(authenticated_principal)  # State values belong to the token's principal

__all__ = ("ListRoots", "Sample", "check_server", "inject")
