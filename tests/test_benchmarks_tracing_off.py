"""`benchmarks.tracing_off` takes the tracing feature out of a copy of the package by
editing its source; when the code moves, its edits stop matching. This runs them on the
package as it is now, and the copy they leave must import and run a call on every path the
tool counts (`Container.run`, sequential and concurrent; ``call.resolve`` in a session; a
multi-round ``call.run``) without loading any of tracing's modules. Counting the two needs
valgrind and minutes, so it is the tool's own run, not here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import tracing_off  # noqa: E402

# Run in a fresh interpreter with the stripped copy first on sys.path; the copy's path is
# its first argument.
PROGRAM = """
import inspect
import sys
from collections.abc import AsyncIterator
from typing import Annotated

sys.path.insert(0, sys.argv[1])

import anyio
from pydantic import BaseModel

import resolvent
from resolvent import Container, Elicit, InputRequired, Resolve, Scope

assert resolvent.__file__.startswith(sys.argv[1]), resolvent.__file__
assert "tracing" not in inspect.signature(Container).parameters
assert not hasattr(Container, "tracing")


class Ok(BaseModel):
    ok: bool


def handlers(container: Container):
    @container.provider(scope=Scope.APP)
    async def base() -> int:
        return 1

    async def conn() -> AsyncIterator[int]:
        yield 10

    async def left(b: Annotated[int, Resolve(base)]) -> int:
        return b + 1

    async def right(c: Annotated[int, Resolve(conn)]) -> int:
        return c + 2

    async def handler(
        user: str, a: Annotated[int, Resolve(left)], b: Annotated[int, Resolve(right)]
    ) -> str:
        return f"{user}:{a + b}"

    async def question(a: Annotated[int, Resolve(left)]) -> Elicit[Ok]:
        return Elicit("Go on?", Ok)

    async def asking(
        a: Annotated[int, Resolve(left)], ok: Annotated[Ok, Resolve(question)]
    ) -> str:
        return f"{a}:{ok.ok}"

    return handler, asking


async def main() -> None:
    for concurrent in (False, True):
        container = Container(concurrent=concurrent)
        handler, asking = handlers(container)
        async with container:
            for _ in range(4):  # interpreted while cold, then its generated code
                assert await container.run(handler, user="u") == "u:14"
            async with container.session() as session, session.call() as call:
                kwargs = await call.resolve(handler, {"user": "u"})
                assert await handler(user="u", **kwargs) == "u:14"
            async with container.call(rounds=True) as call:
                assert await call.run(handler, user="u") == "u:14"
            async with container.call(rounds=True) as call:
                try:
                    await call.run(asking)
                except InputRequired as exc:
                    asked = exc
                else:
                    raise AssertionError("the first round did not ask")
            [key] = asked.questions
            answers = {key: {"action": "accept", "content": {"ok": True}}}
            async with container.call(rounds=True, answers=answers, state=asked.state) as call:
                assert await call.run(asking) == "2:True"


anyio.run(main)
loaded = sorted(name for name in sys.modules if name.startswith("resolvent._engine"))
assert not {"resolvent._engine.tracing", "resolvent._engine.spans"} & set(loaded), loaded
assert any(name.startswith("opentelemetry") for name in sys.modules) is False
print("ran")
"""


def test_the_package_with_tracing_removed_runs_every_counted_path(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    tracing_off.remove_tracing(tmp_path)
    tracing_off.add_unused_function(tmp_path)  # the control: the same, plus one function
    package = tmp_path / "src" / "resolvent"
    assert not (package / "_engine" / "tracing.py").exists()
    assert not (package / "_engine" / "spans.py").exists()
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "src")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran"
