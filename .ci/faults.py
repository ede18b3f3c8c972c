#!/usr/bin/env python3
"""Re-apply the faults an audit once found the whole suite let pass, one at a time, and run
the tests written for each: every fault must fail at least one of them (MUTANTS.md, "The
audit's faults, re-applied"). Standard library only; run it with the virtualenv's Python,
which has pytest: ``.venv/bin/python .ci/faults.py [NUMBER ...]`` (default: every fault).

Each fault is a replacement of one piece of text in one source file, made in a scratch copy
of the project, never in the project itself. A fault whose text is gone (the code moved)
is reported as not applied, and counts as a failure: write it again for the code as it is.
Exit status: 0 when every fault was applied and caught.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY = ("src", "tests", "docs", "examples", "benchmarks")  # what the tests import or read

S = "src/resolvent/"
T_STATE = "tests/test_promises_state.py::"
T_INT = "tests/test_promises_integrations.py::"
T_CORE = "tests/test_promises_core.py::"

# (what breaks, file, text, replacement, tests that should catch it)
FAULTS: list[tuple[str, str, str, str, list[str]]] = [
    (
        "an edit whose value no longer decodes keeps its lease",
        S + "_state/access.py",
        "        except BaseException:\n            ledger.drop(store, key, entry)\n"
        "            await self._release(store, key, token)\n            raise\n"
        "        entry.data, entry.held",
        "        except BaseException:\n            ledger.drop(store, key, entry)\n"
        "            raise\n        entry.data, entry.held",
        [T_STATE + "test_an_edit_of_a_value_that_does_not_decode_lets_go_of_it"],
    ),
    (
        "max_size refuses a value of exactly max_size bytes",
        S + "_state/codec.py",
        "if len(data) > self.max_size:",
        "if len(data) >= self.max_size:",
        [T_STATE + "test_a_value_of_exactly_max_size_bytes_is_stored"],
    ),
    (
        "a value created and deleted in one call is stored",
        S + "_state/state.py",
        "if held.deleted or ledger.refused:\n                return\n            key = StateKey",
        "if ledger.refused:\n                return\n            key = StateKey",
        [T_STATE + "test_a_value_created_and_deleted_in_one_call_is_not_stored"],
    ),
    (
        "two States naming one URL get two stores",
        S + "_state/state.py",
        "found = _URL_STORES.get(url)",
        "found = None",
        [T_STATE + "test_kinds_naming_the_same_url_share_one_store"],
    ),
    (
        "MemoryStore: a save does not refresh the idle time",
        S + "_stores/memory.py",
        '        entry.lease, entry.lease_until = "", 0.0\n'
        "        entry.expires = min(now + idle, entry.deadline)\n",
        '        entry.lease, entry.lease_until = "", 0.0\n',
        [T_STATE + "test_an_edit_refreshes_the_idle_time_when_it_ends"],
    ),
    (
        "SqliteStore: a delete past its lease, taken over, still deletes",
        S + "_stores/sqlite.py",
        'f"DELETE FROM resolvent_state WHERE {_WHERE} AND lease = ? AND expires > ?",\n'
        "                (*key, token, now),",
        'f"DELETE FROM resolvent_state WHERE {_WHERE} AND expires > ?",\n'
        "                (*key, now),",
        [T_STATE + "test_a_delete_past_its_lease_fails_and_deletes_nothing"],
    ),
    (
        "RedisStore: a read does not move the key's expiry on the server",
        S + "_stores/redis.py",
        "  redis.call('HSET', KEYS[1], 'e', ms(expires))\nend\n"
        "redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))\n",
        "  redis.call('HSET', KEYS[1], 'e', ms(expires))\nend\n"
        "if tonumber(ARGV[4]) > 0 then\n"
        "  redis.call('PEXPIRE', KEYS[1], math.max(1, expires - now))\nend\n",
        [T_STATE + "test_a_redis_read_moves_the_servers_expiry"],
    ),
    (
        "RedisStore: 'cannot reach' shows the password",
        S + "_stores/redis.py",
        "shown = redact(url)",
        "shown = url",
        [T_STATE + "test_cannot_reach_redis_names_the_url_without_its_password"],
    ),
    (
        "sqlite:///relative.db opens /relative.db",
        S + "_stores/opener.py",
        "path = urllib.parse.unquote(rest[3:])",
        "path = urllib.parse.unquote(rest[2:])",
        [T_STATE + "test_a_relative_sqlite_url_opens_in_the_working_directory"],
    ),
    (
        "the principal prefers the OAuth client id over the subject",
        S + "mcp/_principal.py",
        "    if subject:\n",
        "    if subject and not client_id:\n",
        [T_INT + "test_users_of_one_oauth_client_are_different_principals"],
    ),
    (
        "a keyed session is idle from the start of its last call",
        S + "mcp/_sessions.py",
        "        entry.active -= 1\n        entry.last_used = anyio.current_time()\n",
        "        entry.active -= 1\n",
        [T_INT + "test_a_keyed_session_is_idle_from_the_end_of_its_last_call"],
    ),
    (
        "past max_sessions the first created is closed, not the least recently used",
        S + "mcp/_sessions.py",
        "        else:\n            self.entries.move_to_end(key)\n",
        "",
        [T_INT + "test_past_max_sessions_the_least_recently_used_session_is_closed"],
    ),
    (
        "an override no longer reaches a hot tool that takes Context",
        S + "mcp/_tool.py",
        "            if start is None or (blocks and overrides.get() is not None):\n"
        "                return await run(kwargs)\n"
        "            # The hot path, in this one frame",
        "            if start is None:\n"
        "                return await run(kwargs)\n"
        "            # The hot path, in this one frame",
        [T_INT + "test_an_override_reaches_a_hot_tool_that_takes_context"],
    ),
    (
        "a FastAPI app without the container's lifespan: no 'not open' error",
        S + "_container/launch.py",
        "        else:\n            check_scopes(plan, self.scopes())\n",
        "        else:\n",
        [T_INT + "test_a_route_of_an_app_without_the_container_lifespan_says_so"],
    ),
    (
        "a finalizer error grouped with the call's is dropped",
        S + "_runtime/teardown.py",
        "return all(_only(inner, exc) for inner in group.exceptions)",
        "return any(_only(inner, exc) for inner in group.exceptions)",
        [T_CORE + "test_a_finalizer_error_grouped_with_the_calls_is_noted_and_logged"],
    ),
    (
        "a plain override closes its resources in set-up order",
        S + "_container/overrides.py",
        "for step, obj in reversed(self._leave(sync=True)):",
        "for step, obj in self._leave(sync=True):",
        [T_CORE + "test_leaving_a_plain_override_closes_in_reverse_order_of_set_up"],
    ),
    (
        "waiters of a shared CALL value get its cancelled maker's cancellation",
        S + "_runtime/sharing.py",
        "if error is not None and not isinstance(error, anyio.get_cancelled_exc_class()):\n"
        "        creation.error = error",
        "if error is not None:\n        creation.error = error",
        [T_CORE + "test_waiters_make_a_shared_call_value_whose_maker_was_cancelled"],
    ),
    (
        "any cancellation abandons a sync set-up in its thread",
        S + "_runtime/resources.py",
        "if setup.abandon(expired=shared or (holder is not None and holder.expired)):",
        "if setup.abandon(expired=True):",
        [T_CORE + "test_a_cancelled_call_waits_for_a_sync_set_up_and_closes_it"],
    ),
    (
        "a hot run of a handler without parameters ignores an argument",
        S + "_engine/codegen.py",
        'w.emit(f"    if args: {other}")',
        'w.emit("    pass")',
        [T_CORE + "test_an_argument_the_handler_does_not_take_is_refused_hot_or_cold"],
    ),
    (
        "a SESSION provider that asks compiles",
        S + "_graph/checks.py",
        "if scope > Scope.CALL and info.may_ask",
        "if scope > Scope.SESSION and info.may_ask",
        [T_CORE + "test_a_longer_lived_provider_that_asks_does_not_compile"],
    ),
    (
        "a SESSION resolver taking a call argument compiles",
        S + "_graph/compiler.py",
        "if scope > Scope.CALL:\n                    captive_source(self, node, param, "
        'f"the call argument',
        "if scope > Scope.SESSION:\n                    captive_source(self, node, param, "
        'f"the call argument',
        [T_CORE + "test_a_longer_lived_provider_taking_a_call_argument_does_not_compile"],
    ),
    (
        "container.start(a.pool, b.pool) starts only the second",
        S + "_container/plans.py",
        "if not (isinstance(name, str) and name.isidentifier()) or name in params:",
        "if not (isinstance(name, str) and name.isidentifier()):",
        [T_CORE + "test_start_creates_every_target_even_two_of_one_name"],
    ),
    (
        "the console script cannot import from the working directory",
        S + "_tools/cli.py",
        "    if cwd not in sys.path:\n        sys.path.insert(0, cwd)\n",
        "",
        [T_CORE + "test_the_console_script_imports_from_the_working_directory"],
    ),
    (
        "bench --calls 1 is refused",
        S + "_tools/cli.py",
        "if args.calls is not None and args.calls < 1:",
        "if args.calls is not None and args.calls <= 1:",
        [T_CORE + "test_bench_accepts_a_single_call"],
    ),
]


def pytest(copy: Path, tests: list[str], *options: str) -> subprocess.CompletedProcess[str]:
    """Run *tests* in *copy*, on the copy's own source."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *tests],
        cwd=copy,
        env=dict(os.environ, PYTHONPATH=str(copy / "src")),
        capture_output=True,
        text=True,
        check=False,
    )


def unfaulted(copy: Path, chosen: list[int]) -> bool:
    """Whether every test named for the *chosen* faults passes on the code as it is: a test
    that fails anyway would count its fault as caught."""
    tests = sorted({test for n in chosen for test in FAULTS[n - 1][4]})
    proc = pytest(copy, tests)
    if proc.returncode == 0:
        print(f"the {len(tests)} tests pass on the code as it is")
        return True
    print(f"the tests fail on the code as it is (pytest exit {proc.returncode}):")
    print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    return False


def run(copy: Path, number: int) -> bool:
    """Apply fault *number* in *copy*, run its tests, restore; True if a test failed."""
    what, file, old, new, tests = FAULTS[number - 1]
    path = copy / file
    source = path.read_text()
    if source.count(old) != 1:
        print(f"{number:2} NOT APPLIED ({source.count(old)} matches in {file}): {what}")
        return False
    path.write_text(source.replace(old, new))
    try:
        began = time.monotonic()
        proc = pytest(copy, tests, "-x")
        took = time.monotonic() - began
    finally:
        path.write_text(source)
    if proc.returncode == 1:  # tests ran, and one failed
        failed = [
            line.split(" ", 1)[1].split(" - ")[0]
            for line in proc.stdout.splitlines()
            if line.startswith("FAILED ")
        ]
        print(f"{number:2} caught ({took:.1f} s) {what}: {', '.join(failed)}")
        return True
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    print(f"{number:2} MISSED (pytest exit {proc.returncode}, {took:.1f} s) {what}: {last}")
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    return False


def main(argv: list[str]) -> int:
    chosen = [int(a) for a in argv] or list(range(1, len(FAULTS) + 1))
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        copy = Path(tmp)
        for name in COPY:
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, copy / name, ignore=ignore)
        for path in [*ROOT.glob("*.md"), ROOT / "pyproject.toml"]:
            shutil.copy(path, copy)
        if not unfaulted(copy, chosen):
            return 1
        missed = [n for n in chosen if not run(copy, n)]
    if missed:
        print(f"not caught or not applied: {', '.join(map(str, missed))}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
