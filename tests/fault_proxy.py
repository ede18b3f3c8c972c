"""A TCP proxy on 127.0.0.1 that injects faults between a client and its server.

The tests put it between a `RedisStore` and a real Valkey and break the connection on
purpose: added latency, every connection dropped, a reset as a script goes by (before or
after the server ran it), a freeze (connections stay open, nothing moves), a stop (new
connections refused). It runs in the test's own event loop (anyio: asyncio or trio).

```python
async with fault_proxy(valkey_url) as proxy:
    store_url = proxy.url            # connect the client here
    proxy.freeze(); ...; proxy.thaw()
```
"""

from __future__ import annotations

import contextlib
import socket
import struct
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute


class FaultProxy:
    """The proxy's switches; see the module docstring. Faults stay on until switched off.

    Attributes:
        url: the upstream URL with the proxy's address in its place.
        connections: how many client connections the proxy accepted so far.
    """

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        assert parts.hostname in ("127.0.0.1", "localhost"), "loopback only"
        self.upstream = (parts.hostname, parts.port or 6379)
        self._parts = parts
        self.url = ""
        self.connections = 0
        self.latency = 0.0
        self._flowing = anyio.Event()
        self._flowing.set()
        self._reset_on: bytes | None = None
        self._reset_after = False
        self._refusing = False
        self._live: set[anyio.abc.SocketStream] = set()
        self._holding = 0  # chunks received and not yet passed on
        self._group: anyio.abc.TaskGroup | None = None

    # -- the switches ------------------------------------------------------------------

    def freeze(self) -> None:
        """Stop moving bytes both ways; connections stay open (a server that hangs)."""
        if self._flowing.is_set():
            self._flowing = anyio.Event()

    def thaw(self) -> None:
        """Move bytes again, those held back first."""
        self._flowing.set()

    async def drained(self) -> None:
        """Wait until every byte held back (by a freeze, latency) has been passed on, and
        a moment more for the server to run what it got."""
        with anyio.fail_after(10):
            while self._holding:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)

    def drop(self) -> None:
        """Close every open connection now (a server that restarts)."""
        for stream in list(self._live):
            self._close(stream)

    def reset_on(self, marker: bytes, *, after: bool) -> None:
        """Reset both ends of the next connection whose client sends bytes containing
        *marker* (``b"EVALSHA"``: a script): before those bytes reach the server, or
        *after* the server had them and before its reply reaches the client."""
        self._reset_on, self._reset_after = marker, after

    def refuse(self, refusing: bool = True) -> None:
        """Refuse new connections and drop the open ones (a server that is stopped)."""
        self._refusing = refusing
        if refusing:
            self.drop()

    # -- the plumbing ------------------------------------------------------------------

    def _close(self, stream: anyio.abc.SocketStream) -> None:
        """Reset *stream*: no FIN, an RST (SO_LINGER 0), the way a dead peer looks."""
        self._live.discard(stream)
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.shutdown(socket.SHUT_RDWR)

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        self.connections += 1
        async with client:
            if self._refusing:
                self._close(client)
                return
            try:
                server = await anyio.connect_tcp(*self.upstream)
            except OSError:
                self._close(client)
                return
            async with server:
                pair = {client, server}
                self._live |= pair
                try:
                    async with anyio.create_task_group() as group:
                        group.start_soon(self._pump, client, server, pair, True, group)
                        group.start_soon(self._pump, server, client, pair, False, group)
                finally:
                    self._live -= pair

    async def _pump(
        self,
        source: anyio.abc.SocketStream,
        sink: anyio.abc.SocketStream,
        pair: set[anyio.abc.SocketStream],
        upward: bool,
        group: anyio.abc.TaskGroup,
    ) -> None:
        try:
            while True:
                data = await source.receive()
                self._holding += 1
                try:
                    await self._flowing.wait()
                    if self.latency:
                        await anyio.sleep(self.latency)
                    await self._flowing.wait()
                finally:
                    self._holding -= 1
                if not pair <= self._live:  # dropped meanwhile
                    break
                marker = self._reset_on
                hit = upward and marker is not None and marker in data
                if hit and not self._reset_after:
                    self._reset_on = None
                    break
                if hit:  # the server runs it; its reply is lost with the connection
                    self._reset_on = None
                    self._live -= pair  # the other way forwards nothing from now on
                    await sink.send(data)
                    await anyio.sleep(0.05)
                    break
                await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        for stream in pair:
            self._close(stream)
        group.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def fault_proxy(upstream: str) -> AsyncIterator[FaultProxy]:
    """A `FaultProxy` to *upstream* (a ``redis://127.0.0.1:PORT/...`` URL), listening on
    a free port of 127.0.0.1 for as long as the block runs."""
    proxy = FaultProxy(upstream)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    netloc = proxy._parts.netloc.rsplit("@", 1)
    netloc[-1] = f"127.0.0.1:{port}"
    proxy.url = urllib.parse.urlunsplit(proxy._parts._replace(netloc="@".join(netloc)))
    async with listener, anyio.create_task_group() as group:
        proxy._group = group
        group.start_soon(_accept, listener, proxy)
        try:
            yield proxy
        finally:
            proxy.thaw()
            proxy.drop()
            group.cancel_scope.cancel()


async def _accept(listener: Any, proxy: FaultProxy) -> None:
    await listener.serve(proxy._serve)
