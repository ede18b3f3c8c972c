"""An injected MCP server for the HTTP tests; also runnable as a stateless worker process.

    python tests/mcp_http_server.py PORT KEYHEX

serves stateless streamable HTTP on 127.0.0.1:PORT, sealing request_state with the shared
key, so two such processes can serve the rounds of one call.
"""

import os
import sys
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from pydantic import BaseModel

from resolvent import Container, Elicit, Resolve, Scope
from resolvent.mcp import inject


class Name(BaseModel):
    name: str


def build(
    events: list[str], security: RequestStateSecurity | None = None, **options: Any
) -> MCPServer:
    container = Container()
    server = MCPServer("http-notes", lifespan=container.lifespan, request_state_security=security)
    sessions = iter(range(1, 1_000_000))

    @container.provider(scope=Scope.APP)
    async def pool():
        events.append("pool open")
        try:
            yield "pool"
        finally:
            events.append("pool close")

    @container.provider(scope=Scope.SESSION)
    async def visitor(p: Annotated[str, Resolve(pool)]):
        n = next(sessions)
        events.append(f"visitor {n} open")
        try:
            yield f"visitor-{n}"
        finally:
            events.append(f"visitor {n} close")

    async def ask_name(ctx: Context) -> Elicit[Name]:
        events.append(f"ask in {os.getpid()}")
        return Elicit("Your name?", Name)

    @server.tool()
    @inject(container)
    async def greet(greeting: str, name: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"{greeting} {name.name} (pid {os.getpid()})"

    async def transaction():
        events.append("transaction open")
        try:
            yield "tx"
        finally:
            events.append("transaction close")

    @server.tool()
    @inject(container)
    async def sign(
        tx: Annotated[str, Resolve(transaction)], name: Annotated[Name, Resolve(ask_name)]
    ) -> str:
        return f"{name.name} signed {tx}"

    @server.tool()
    @inject(container, **options)
    async def whoami(who: Annotated[str, Resolve(visitor)]) -> str:
        return who

    return server


def main() -> None:
    import uvicorn

    port, key = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
    server = build([], RequestStateSecurity(keys=[key]))
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
