"""Shared pytest configuration.

Every ``async def test_...`` runs once per anyio backend (asyncio and trio)
through anyio's pytest plugin. Test authors need no marker: coroutine tests
are marked ``anyio`` automatically. To pin a module or test to one backend,
override the ``anyio_backend`` fixture locally.
"""

from __future__ import annotations

import gc
import importlib.util
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from optional import OPTIONAL_PACKAGES, skip_if_optional

# CI replays the same examples on every run (a failure there is reproducible from the
# log); a developer's run explores new ones and keeps failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


class _ModuleNeedingExtras(pytest.Module):
    """A test module that is skipped when an optional package it imports is missing
    (tests/optional.py lists them)."""

    def collect(self) -> Any:
        try:
            return super().collect()
        except pytest.Collector.CollectError as error:
            skip_if_optional(error.__cause__, self.path.name)
            raise
        except SystemExit as error:  # an example it imports exits, saying what to install
            for name in OPTIONAL_PACKAGES:
                if name in str(error.code) and importlib.util.find_spec(name) is None:
                    pytest.skip(f"{self.path.name}: {error.code}", allow_module_level=True)
            raise


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep what collecting built out of every later garbage collection.

    Collecting imports every test module, with the apps, containers and plans each builds
    at import: a quarter of a million objects that live until the run ends. Every full
    collection walked them all again: Python's own, and each `gc.collect()` of
    ``resolvent bench`` and the benchmarks (a sixth of a second apiece, half the time of
    tests/test_bench.py). Frozen, a collection walks what the tests made since, as in a
    program of one module.
    """
    gc.collect()
    gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--eager-shield",
        action="store_true",
        help="run every call's teardown shield on its fallback, the cancel scope entered "
        "before any setup, as on an anyio or trio whose scope tree has another shape",
    )


def pytest_configure(config: pytest.Config) -> None:
    """With ``--eager-shield``, mark both backends' scope trees as not of the shape the
    lazy teardown shield reads (`resolvent._runtime.shield.available` and
    `_trio_available` then answer False without looking): every call takes the fallback.
    CI runs the shield's tests with and without it, on the newest and the lowest
    declared anyio and trio (.ci/jobs.py, `run_shield_tests`). A switch of the tests,
    not of the package."""
    if config.getoption("eager_shield"):
        from resolvent._runtime import shield

        shield._ok = False  # pyright: ignore[reportPrivateUsage]
        shield._trio_ok = False  # pyright: ignore[reportPrivateUsage]


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    return _ModuleNeedingExtras.from_parent(parent, path=module_path)


# CI's packaging job runs some tests against the installed wheel: make sure they do.
if os.environ.get("RESOLVENT_TEST_INSTALLED"):
    import resolvent

    _source = Path(__file__).resolve().parent.parent / "src"
    if Path(resolvent.__file__).resolve().is_relative_to(_source):
        raise RuntimeError(
            f"RESOLVENT_TEST_INSTALLED is set, but resolvent comes from {resolvent.__file__}"
        )


@pytest.fixture(scope="session")
def valkey_url() -> Iterator[str]:
    """The URL of the run's one real Valkey server, started by the first test that asks.

    Defined here, once, so every module shares it: a session fixture imported into each
    module would be a fixture of each module, one server per module. Each test keeps to
    a key prefix of its own (`state_helpers.open_test_store`).
    """
    from state_helpers import valkey_server

    with valkey_server() as url:
        yield url


ANYIO_BACKENDS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param("trio", id="trio"),
]


@pytest.fixture(scope="module", params=ANYIO_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The anyio backend an async test runs on; every async test runs on each."""
    backend: str = request.param
    return backend


def _is_coroutine_test(obj: object) -> bool:
    # Hypothesis wraps @given tests in a sync function; look at the inner test.
    inner = getattr(getattr(obj, "hypothesis", None), "inner_test", obj)
    return inspect.iscoroutinefunction(inner)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Mark every coroutine test function with ``pytest.mark.anyio``.

    This has to happen while the test is being collected, not later in
    ``pytest_collection_modifyitems``: anyio's plugin decides at this point
    whether the test requests the ``anyio_backend`` fixture, and so whether it
    is parametrized over the backends above. Returning None lets pytest (and
    anyio's own hook) go on to build the item.
    """
    if not isinstance(collector, pytest.Module | pytest.Class):
        return
    if not collector.istestfunction(obj, name) or not _is_coroutine_test(obj):
        return
    if not any(mark.name == "anyio" for mark in getattr(obj, "pytestmark", ())):
        pytest.mark.anyio(obj)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Safety net: any coroutine test that still lacks the marker gets it here."""
    for item in items:
        if (
            isinstance(item, pytest.Function)
            and _is_coroutine_test(item.obj)
            and item.get_closest_marker("anyio") is None
        ):
            item.add_marker(pytest.mark.anyio)


@pytest.fixture(autouse=True)
def _store_schemes_as_they_were() -> Iterator[None]:
    """A store scheme a test or a docs example adds is gone after it: the table of schemes
    is the process's, and the message for an unknown scheme lists the ones it holds.
    (Schemes added when a module is imported, such as toy_store's, stay.)"""
    import sys

    opener = sys.modules.get("resolvent._stores.opener")
    before = None if opener is None else dict(opener._SCHEMES)
    yield
    opener = sys.modules.get("resolvent._stores.opener")
    if opener is not None and before is not None:
        opener._SCHEMES.clear()
        opener._SCHEMES.update(before)
