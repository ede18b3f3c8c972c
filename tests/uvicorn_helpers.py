"""Serve an app the way people run it: ``python -m uvicorn module:app`` in a subprocess.

`serve` starts uvicorn on 127.0.0.1 with ``--port 0`` (the system picks a free port, read
back from uvicorn's own start-up line), yields the base URL, and on exit stops the server
with Ctrl-C (SIGINT) as a person would, so the app's lifespan shuts down. Everything the
process printed is then in `Served.output` (stdout and stderr, one line each); while it
runs, `Served.read_until` waits (boundedly) for lines it has yet to print.

`run_server` does the same for any server command that prints its address. Every wait is
bounded: a server that never says where it is, or never prints an awaited line, fails the
test within `START_TIMEOUT` with all it printed, instead of hanging until pytest's timeout.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
STARTED = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
START_TIMEOUT = 60.0  # a cold interpreter importing FastAPI and the MCP SDK on a busy machine
STOP_TIMEOUT = 30.0


@dataclass
class Served:
    """A running (then stopped) uvicorn process."""

    url: str = ""
    lines: list[str] = field(default_factory=list)
    returncode: int | None = None
    target: str = ""
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue, repr=False)
    _ended: bool = False

    @property
    def output(self) -> list[str]:
        """Every line the process printed so far, stripped."""
        return [line.rstrip("\n") for line in self.lines]

    def printed(self, prefix: str) -> list[str]:
        """The lines that start with *prefix* (the apps print their events that way)."""
        return [line for line in self.output if line.startswith(prefix)]

    def read_until(
        self, done: Callable[[list[str]], bool], timeout: float = START_TIMEOUT
    ) -> list[str]:
        """Read what the process prints until ``done(self.output)`` holds; return the output.

        Fails after *timeout* seconds, or when the process has ended first, with
        everything it printed.
        """
        deadline = time.monotonic() + timeout
        while not done(self.output):
            if self._ended:
                raise AssertionError(
                    f"{self.target} ended before printing what the test waits for:\n"
                    + "\n".join(self.output)
                )
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"{self.target} did not print what the test waits for in {timeout} s:\n"
                    + "\n".join(self.output)
                ) from None
            if line is None:
                self._ended = True
            else:
                self.lines.append(line)
        return self.output


def _ctrl_c_as_in_a_terminal() -> None:
    """Run in the server process before it starts: SIGINT back to its default.

    A test run started in the background by a shell without job control ignores SIGINT,
    and a child inherits an ignored signal: Python would then install no Ctrl-C handler
    in the server, which shuts down on Ctrl-C (uvicorn catches it) but then does not exit
    the way Ctrl-C makes a program exit, as tests check.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _pump(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)
    into.put(None)


@contextmanager
def serve(target: str, *, app_dir: Path = TESTS, factory: bool = False) -> Iterator[Served]:
    """Run ``uvicorn target`` (``module:attribute``) from *app_dir* until the block ends."""
    command = [sys.executable, "-m", "uvicorn", target, "--app-dir", str(app_dir)]
    command += ["--host", "127.0.0.1", "--port", "0", "--log-level", "info", "--no-access-log"]
    if factory:
        command.append("--factory")
    with run_server(command, cwd=app_dir, started=STARTED) as served:
        yield served


@contextmanager
def run_server(
    command: list[str],
    *,
    cwd: Path,
    started: re.Pattern[str],
    env: dict[str, str] | None = None,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[Served]:
    """Run *command* until the block ends; its base URL is group 1 of the first output line
    that *started* matches (within *start_timeout* seconds, or the test fails with what the
    process printed). *env* is added to this process's environment. Stopped with SIGINT,
    as Ctrl-C would."""
    target = " ".join(command[1:])
    # The package this test run imports (a source tree on PYTHONPATH) serves too.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})}
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=str(cwd),
        preexec_fn=_ctrl_c_as_in_a_terminal,  # the tests start servers from the main thread
    )
    served = Served(target=target)
    lines = served._queue
    pump = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    pump.start()
    deadline = time.monotonic() + start_timeout
    try:
        while not served.url:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"{target} did not start in {start_timeout} s:\n" + "\n".join(served.output)
                ) from None
            if line is None:
                proc.wait(timeout=STOP_TIMEOUT)
                raise AssertionError(
                    f"{target} exited with {proc.returncode} before serving:\n"
                    + "\n".join(served.output)
                )
            served.lines.append(line)
            match = started.search(line)
            if match:
                served.url = match.group(1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pump.join(timeout=STOP_TIMEOUT)
        while True:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                served.lines.append(line)
        served.returncode = proc.returncode
