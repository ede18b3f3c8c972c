"""Scopes are data: a copy of the package with one more scope, REQUEST between SESSION and
CALL, added only as a member of the `Scope` enum, compiles and checks plans that use it
and runs them, generated and interpreted, with each REQUEST value made once per REQUEST
scope: the code that runs plans names no scope it does not have to (ARCHITECTURE.md,
"Adding a scope")."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import resolvent

_ENUM = '''    SESSION = 2
    """One client session (``container.session()``; one MCP session)."""
    APP = 3
'''
_WITH_REQUEST = '''    REQUEST = 2
    """One request inside a session (only in this test's copy of the package)."""
    SESSION = 3
    """One client session (``container.session()``; one MCP session)."""
    APP = 4
'''

_RUN = textwrap.dedent(
    """
    from typing import Annotated

    import anyio

    from resolvent import Container, InvalidSignature, Resolve, Scope
    from resolvent._container.launch import HOT_AFTER, is_cold
    from resolvent._engine.interpreter import interpret
    from resolvent._runtime.cache import LiveScope
    from resolvent._vocabulary.scopes import SLOTS

    assert Scope.APP > Scope.SESSION > Scope.REQUEST > Scope.CALL
    made = []
    container = Container()

    @container.provider(scope=Scope.APP)
    async def app_value() -> str:
        made.append("app")
        return "app"

    @container.provider(scope=Scope.SESSION)
    async def session_value(a: Annotated[str, Resolve(app_value)]) -> str:
        made.append("session")
        return a + "/session"

    @container.provider(scope=Scope.REQUEST)
    def request_value(s: Annotated[str, Resolve(session_value)]) -> str:
        made.append("request")
        return s + "/request" + str(made.count("request"))

    async def call_value(r: Annotated[str, Resolve(request_value)]) -> str:
        made.append("call")
        return r + "/call"

    async def handler(
        c: Annotated[str, Resolve(call_value)], r: Annotated[str, Resolve(request_value)]
    ) -> str:
        return c + "|" + r

    @container.provider(scope=Scope.SESSION)
    def captive(r: Annotated[str, Resolve(request_value)]) -> str:
        return r

    async def wrong(c: Annotated[str, Resolve(captive)]) -> str:
        return c

    try:
        container.compile(wrong)
    except InvalidSignature as error:
        assert "captive dependency: captive (Scope.SESSION) depends on request_value (Scope.REQUEST)" in str(error), error
    else:
        raise AssertionError("a SESSION value over a REQUEST value compiled")

    async def main() -> None:
        async with container:
            plan = container.compile(handler)
            session = LiveScope(Scope.SESSION)

            def scopes(request: LiveScope) -> tuple[object, ...]:
                found = [None] * len(Scope)
                found[SLOTS[Scope.APP]] = container._app
                found[SLOTS[Scope.SESSION]] = session
                found[SLOTS[Scope.REQUEST]] = request
                return tuple(found)

            first, second = LiveScope(Scope.REQUEST), LiveScope(Scope.REQUEST)
            got = []
            for _ in range(HOT_AFTER + 2):  # interpreted first, then generated
                got.append(await plan.run_fn({}, {}, scopes(first), handler))
            assert not is_cold(plan.run_fn)
            source = plan.code.source(plan, "run")
            assert "request_cache = scopes[2].cache" in source, source
            got.append(await plan.heat()({}, {}, scopes(second), handler))
            for concurrent in (False, True):
                kwargs = await interpret(
                    plan, container.call(), {}, {}, scopes(second), concurrent=concurrent
                )
                got.append(await handler(**kwargs))
            one = "app/session/request1"
            two = "app/session/request2"
            assert got == [f"{one}/call|{one}"] * (HOT_AFTER + 2) + [f"{two}/call|{two}"] * 3, got
            assert made.count("app") == made.count("session") == 1, made
            assert made.count("request") == 2 and made.count("call") == HOT_AFTER + 5, made

    anyio.run(main)
    print("ok")
    """
)


def test_a_scope_added_only_to_the_enum_runs_plans_generated_and_interpreted(
    tmp_path: Path,
) -> None:
    package = Path(resolvent.__file__).parent
    copy = tmp_path / "resolvent"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    scopes = copy / "_vocabulary" / "scopes.py"
    source = scopes.read_text(encoding="utf-8")
    assert source.count(_ENUM) == 1, "the Scope enum changed: update this test's patch"
    scopes.write_text(source.replace(_ENUM, _WITH_REQUEST), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", _RUN],
        env={"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_every_scope_between_app_and_call_says_how_to_open_it() -> None:
    """A new scope's one check besides the enum: the message for a plan that needs it
    where none is open names what opens one (`check_scopes`)."""
    from resolvent import Scope
    from resolvent._runtime.failures import _OPENED_BY  # pyright: ignore[reportPrivateUsage]
    from resolvent._vocabulary.scopes import SLOTS

    assert set(_OPENED_BY) == set(Scope) - {Scope.APP, Scope.CALL}
    order = sorted(Scope, key=lambda scope: SLOTS[scope])
    assert order[0] is Scope.APP and order[-1] is Scope.CALL  # longest-lived first
