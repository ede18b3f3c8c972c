#!/usr/bin/env python3
"""Developer entry point for resolvent. Standard library only.

Usage:
    python3 dev.py demo          run examples/demo.py
    python3 dev.py test [ARGS]   run the test suite (ARGS go to pytest)
    python3 dev.py check         ruff check, ruff format --check, mypy, pyright
    python3 dev.py bench [ARGS]  run the benchmarks (ARGS go to python -m benchmarks)
    python3 dev.py bench --python 3.12[,3.13...] [ARGS]
                                 the same under other CPythons, one run each (see below)
    python3 dev.py docs          build the documentation (mkdocs build --strict)
    python3 dev.py mutate [--jobs N] [--again] [MODULE ...]
                                 mutation testing of MODULEs (default: all in MUTATE)

The first run creates .venv next to this file and installs the project into it,
editable, with what the command needs and nothing more: `demo` the mcp extra (the
MCP SDK); `test` the extras the suite covers (mcp, starlette, fastapi, redis, trio)
and the test tools (the `test` extra); `check` adds the `lint` extra (ruff, mypy,
pyright), `docs` the `docs` extra (mkdocs), `bench` the `bench` extra (the benchmark
peers, matplotlib). What one command installed the next finds in place. It reinstalls
whenever pyproject.toml changes. Every command then runs with the virtualenv's
Python, and dev.py exits with that command's exit code.

`mutate` runs mutmut 3 (the mutate extra, installed into .venv on first use) on one
module at a time, niced, in a copy of the project under .mutate/MODULE/: mutmut changes one
operator, constant or call of the module at a time (a mutant) and runs the tests that reach
the changed function (it records which tests call which function first, so a mutant runs a
few tests, not the suite). A mutant no test fails on has "survived": a slip the tests would
let through. It prints each module's kill rate and its survivors (`mutmut show NAME` in
.mutate/MODULE/ shows one). MODULE is a path under src/resolvent without .py (`_state`,
`mcp/_sessions`, `_stores` for the package); MUTATE lists the tests each runs, and MUTANTS.md
the last kill rates and the survivors that are equivalent. Run it on a module you changed,
before landing: kill a survivor with a new test, or list it as equivalent when it cannot
change anything a user observes. Async tests run on asyncio only there, fastest first.
`--jobs N` caps the workers (default: one per core). `--again` keeps the last run's copy
when the module's source and its tests in MUTATE are unchanged since: it copies the tests
and the rest of the package in afresh and runs only the mutants not killed yet (survivors
not listed as equivalent, those no test reached, those a stopped run never tried), so a
new test for a survivor is checked in minutes and the counts still cover every mutant. It
exits 1 when a module's tests kill under 90% of its mutants. One module takes minutes to
half an hour on two shared cores, so CI runs it beside the main run, on the modules a
change touches (`.ci/jobs.py mutate --changed BASE`), and on all of them on a schedule
(MUTANTS.md says when and why).

`bench --python X.Y` finds CPython X.Y (pythonX.Y on PATH, else pyenv's), makes
.venv-bench/pyX.Y with the package and its mcp, fastapi and bench extras, each package
at the version .venv has (so every interpreter runs the same peers), and writes
benchmarks/results/quick-pyXY.json (latest-pyXY.json without --quick) unless ARGS give
--json. For the version of .venv's own interpreter it runs in .venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYPROJECT = ROOT / "pyproject.toml"
STAMP = VENV / ".resolvent-installed"
TEST_EXTRAS = ("mcp", "starlette", "fastapi", "redis", "trio", "test")
EXTRAS = {  # what each command installs
    "demo": ("mcp",),
    "test": TEST_EXTRAS,
    "check": (*TEST_EXTRAS, "lint"),
    "docs": ("docs",),
    "bench": (*TEST_EXTRAS, "bench"),
    "mutate": (*TEST_EXTRAS, "mutate"),
}
WHAT = {
    "mutate": "mutmut, for mutation testing",
    "mcp": "the MCP SDK",
    "starlette": "Starlette",
    "fastapi": "FastAPI",
    "redis": "coredis",
    "trio": "trio",
    "test": "the test tools (pytest, hypothesis, sybil, a Valkey server)",
    "lint": "ruff, mypy and pyright",
    "docs": "mkdocs",
    "bench": "the benchmark peers and matplotlib",
    "dev": "every development tool",
}
MIN_PYTHON = (3, 11)
BENCH_VENVS = ROOT / ".venv-bench"
SRC_PACKAGE = ROOT / "src" / "resolvent"
BENCH_EXTRAS = ("mcp", "fastapi", "bench")
RESULTS = ROOT / "benchmarks" / "results"

MUTATE_WORK = ROOT / ".mutate"
# What the copy holds beside src and tests: what tests import or read (the docs' promises,
# the examples they run).
MUTATE_COPY = ("examples", "benchmarks", "docs")
MUTATE_FLOOR = 90.0  # percent of a module's mutants its tests must kill
# The modules `mutate` runs by default, and the test files that defend each: the stats run
# (which tests reach which function) covers only these, so a module takes minutes.
_STATE_TESTS = (
    "tests/test_state_conformance.py",
    "tests/test_state_versions.py",
    "tests/test_promises_state.py",
    "tests/test_state_race.py",  # processes opening one file at once: SQLite's busy paths
)
_STARLETTE_TESTS = (
    "tests/test_starlette.py",
    "tests/test_web_call_scope.py",
    "tests/test_web_methods.py",
    "tests/test_web_lifespan.py",
    "tests/test_promises_integrations.py",
    "tests/test_state_web.py",  # a Starlette route's arguments from its path and query
    "tests/test_state_settle_web.py",  # a write refused as the call settles: 409, 413, 503
    "tests/test_lifecycle_handlers.py",  # sync endpoints in a thread unless inline
    # A store down while a route loads: 503, its log line and its traceback at DEBUG.
    "tests/test_state_faults.py::test_a_web_route_answers_503_while_the_store_is_down_and"
    "_200_once_it_is_back",
)
_TEARDOWN_TESTS = (
    "tests/test_lifecycle_teardown_order.py",
    "tests/test_lifecycle_teardown_shield.py",
    "tests/test_lifecycle_resources.py",
    "tests/test_lifecycle_direct.py",  # the generated close: `emit_close`'s code, run
    "tests/test_lifecycle_faults.py",
    "tests/test_core_promises.py",
    "tests/test_promises_core.py",
    "tests/test_override_async_resources.py",  # an override's resources, closed in reverse
    "tests/test_state_settle.py",  # writes settled before the call returns
    "tests/test_web_call_scope.py",  # a FastAPI route's resources kept without a call scope
    "tests/test_state_settle_web.py",  # such a route's writes settled before the response
    # Failing FastAPI routes whose resources are kept without a call scope.
    "tests/test_starlette.py::test_many_concurrent_requests_with_faults_leave_nothing_open",
    # `resolvent bench`'s floor: each kind of resource closed by hand (`plain_close`).
    "tests/test_bench.py::test_every_step_kind_runs_probed_as_it_runs_plain",
    # A resource opened as its call closes, or after: closed once, by the call or at once.
    "tests/test_lifecycle_handlers.py::test_a_call_that_closes_while_a_task_still_resolves"
    "_closes_what_opens_late",
    "tests/test_lifecycle_handlers.py::test_a_resource_that_opens_as_its_call_closes_is_closed_once",
    "tests/test_lifecycle_handlers.py::test_a_resource_whose_setup_outlives_its_call_is_closed_once",
    "tests/test_lifecycle_handlers.py::test_a_cancelled_resolution_closes_what_opens_after_its_call",
)
MUTATE: dict[str, tuple[str, ...]] = {
    "_state": (
        *_STATE_TESTS,
        "tests/test_promises_integrations.py",
        "tests/test_state_web.py",
        "tests/test_state_one_call.py",  # one handle through two parameters: one entry
        "tests/test_state_settle.py",  # a refused write, and what the error says was written
        "tests/test_state_settle_mcp.py",
        "tests/test_state_idempotency_mcp.py",  # the idempotency key as an MCP client sends it
        "tests/test_state_faults.py",  # a store down while a lease is renewed or released
        # a load's wait for another call's lease, a span of its own when traced
        "tests/test_tracing.py::test_a_state_edit_that_waits_for_another_calls_lease",
    ),
    "_stores": (  # memory, sqlite, opener: the package less what is listed apart
        *_STATE_TESTS,
        "tests/test_store_schemes.py",  # the opener's table of schemes, and its errors
        "tests/test_state_sqlite_faults.py",  # a SQLite file that cannot be opened or written
    ),
    "_stores/redis": (
        *_STATE_TESTS,
        "tests/test_state_faults.py",  # an outage's error, its cause and its log lines
        "tests/test_state_redis_store.py",  # the server a failure names; a stale clock
    ),
    "mcp/_sessions": ("tests/test_mcp_sessions.py", "tests/test_promises_integrations.py"),
    "mcp/_principal": ("tests/test_promises_integrations.py",),
    "starlette": _STARLETTE_TESTS,
    "_starlette": _STARLETTE_TESTS,  # its requests, routes and arguments, moved apart
    "_runtime/teardown": _TEARDOWN_TESTS,
    "_runtime/kept": _TEARDOWN_TESTS,  # which resources close when: `Kept`, `settle_writes`
    "_graph/checks": (
        "tests/test_core_compile_errors.py",
        "tests/test_core_compile_messages.py",  # each error's whole text, below the handler
        "tests/test_core_mistakes.py",
        "tests/test_core_typecheck.py",
        "tests/test_core_typecheck_elicit.py",  # a question's answer of the wrong type
        "tests/test_core_cm_classes.py",  # a context manager class asked for itself
        "tests/test_promises_core.py",
        "tests/test_core_resolve.py",  # two providers of one type: ambiguous
        "tests/test_cli.py",  # the path and offending edge `resolvent graph` draws
        "tests/test_override_async_resources.py",  # an async resource under a plain `with`
        # A state store that must be APP-scoped and is not (LASTING): the only test of it.
        "tests/test_state_versions.py::test_a_store_that_is_not_app_scoped_is_refused_at_compile"
        "_time",
    ),
    "_tools/cli": (
        "tests/test_cli.py",
        "tests/test_cli_traces.py",  # --traces: each resolver's time in a trace file
        "tests/test_bench.py",
        "tests/test_promises_core.py",
    ),
}

USAGE = __doc__.split("\n\n", 2)[1] if __doc__ else ""


def log(msg: str) -> None:
    print(f"dev.py: {msg}", file=sys.stderr, flush=True)


def venv_bin() -> Path:
    return VENV / ("Scripts" if os.name == "nt" else "bin")


def venv_python() -> Path:
    return venv_bin() / ("python.exe" if os.name == "nt" else "python")


def child_env(venv_dir: Path = VENV) -> dict[str, str]:
    """Environment for commands run inside a virtualenv (as if activated)."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv_dir)
    bin_dir = venv_dir / ("Scripts" if os.name == "nt" else "bin")
    env["PATH"] = str(bin_dir) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: Sequence[str | Path], *, env: dict[str, str] | None = None) -> int:
    """Run a command in the repo root and return its exit code (128+N for signal N)."""
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, check=False)
    except FileNotFoundError as exc:
        log(f"cannot run {cmd[0]}: {exc}")
        return 127
    code = proc.returncode
    if code < 0:  # killed by a signal (POSIX)
        code = 128 - code
    return code


def pyproject_hash() -> str:
    return hashlib.sha256(PYPROJECT.read_bytes()).hexdigest()


def create_venv() -> None:
    log("creating .venv")
    if VENV.exists():
        shutil.rmtree(VENV)
    try:
        venv.create(VENV, with_pip=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        # Some distributions ship Python without ensurepip. Fall back to a bare
        # venv and bootstrap pip into it from the system pip, if there is one.
        log(f"venv with pip failed ({exc}); trying without ensurepip")
        shutil.rmtree(VENV, ignore_errors=True)
        venv.create(VENV, with_pip=False)
        code = run([sys.executable, "-m", "pip", "--python", venv_python(), "install", "pip"])
        if code != 0:
            shutil.rmtree(VENV, ignore_errors=True)
            log("could not install pip into .venv; install your distribution's python3-venv")
            raise SystemExit(code or 1) from exc


def installed_extras(wanted_hash: str) -> set[str]:
    """The extras the stamp says are installed for this pyproject.toml (none if it changed)."""
    try:
        stamp = STAMP.read_text(encoding="utf-8").split()
    except OSError:
        return set()
    if not stamp or stamp[0] != wanted_hash:
        return set()
    have = set(stamp[1:])
    return have | set(WHAT) if "dev" in have else have  # `dev` is every extra


def requirement(line: str) -> str:
    """What a line of pip's output says it is getting, or ''."""
    word, _, rest = line.partition(" ")
    rest = rest.split(" (from ")[0]
    if word == "Collecting":
        return rest
    if word == "Processing" and rest.endswith(".whl"):  # a wheel from a local index
        name, version = Path(rest).name.split("-")[:2]
        return f"{name}=={version}"
    if word == "Obtaining":
        return "resolvent (this checkout, editable)"
    return ""


def pip_install(
    extras: Sequence[str], python: Path | None = None, constraints: Path | None = None
) -> int:
    """Install the project with *extras*, printing pip's steps one short line each."""
    python = python or venv_python()
    cmd: list[str | Path] = [
        python, "-m", "pip", "install",
        "--disable-pip-version-check", "--progress-bar", "off",
        *(["-c", constraints] if constraints else []),
        "-e", f".[{','.join(extras)}]",
    ]  # fmt: skip
    started = time.monotonic()
    collected = 0
    try:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=ROOT,
            env=child_env(python.parent.parent),
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
    except FileNotFoundError as exc:
        log(f"cannot run pip: {exc}")
        return 127
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.strip()
        name = requirement(line)
        if name:
            collected += 1
            log(f"  [{collected}] {name}")
        elif line.startswith("Installing collected packages:"):
            names = line.split(":", 1)[1].split(",")
            log(f"  installing {len(names)} package(s) ({time.monotonic() - started:.0f} s so far)")
        elif line.startswith("Successfully installed"):
            log(f"  done in {time.monotonic() - started:.0f} s")
        elif line.startswith(("ERROR", "error")):
            log(line)
    return proc.wait()


def ensure_env(extras: Sequence[str]) -> None:
    """Create .venv if needed and install the project with *extras* unless it already is."""
    if not venv_python().exists():
        create_venv()
    wanted = pyproject_hash()
    have = installed_extras(wanted)
    if have.issuperset(extras):
        return
    need = sorted(have.union(extras))
    log(
        "installing resolvent (anyio, pydantic, typing_extensions) with "
        + "; ".join(WHAT[e] for e in need)
        + " into .venv"
    )
    code = pip_install(need)
    if code != 0:
        STAMP.unlink(missing_ok=True)
        log(f"install failed (exit {code})")
        raise SystemExit(code)
    STAMP.write_text(" ".join([wanted, *need]) + "\n", encoding="utf-8")


def action_demo(args: list[str]) -> int:
    return run([venv_python(), "examples/demo.py", *args], env=child_env())


def action_test(args: list[str]) -> int:
    return run([venv_python(), "-m", "pytest", *args], env=child_env())


def action_check(args: list[str]) -> int:
    if args:
        log(f"check takes no arguments (got {' '.join(args)})")
        return 2
    py = venv_python()
    steps: list[tuple[str, list[str | Path]]] = [
        ("ruff check", [py, "-m", "ruff", "check"]),
        ("ruff format --check", [py, "-m", "ruff", "format", "--check"]),
        ("mypy --strict src typing_tests", [py, "-m", "mypy", "--strict", "src", "typing_tests"]),
        ("pyright src typing_tests", [py, "-m", "pyright", "src", "typing_tests"]),
    ]
    first_failure = 0
    for name, cmd in steps:
        log(f"running {name}")
        code = run(cmd, env=child_env())
        if code != 0:
            log(f"{name} failed (exit {code})")
            first_failure = first_failure or code
    if first_failure == 0:
        log("all checks passed")
    return first_failure


def action_bench(args: list[str]) -> int:
    versions, args = split_python_option(args)
    if versions is None:
        return run([venv_python(), "-m", "benchmarks", *args], env=child_env())
    if not versions or any(not re.fullmatch(r"3\.\d+", v) for v in versions):
        log(f"--python takes versions like 3.12 or 3.12,3.13 (got {','.join(versions)!r})")
        return 2
    if any(a == "--json" or a.startswith("--json=") for a in args) and len(versions) > 1:
        log("--json names one file: give it with one --python version, or leave it out")
        return 2
    first = 0
    for version in versions:
        code = bench_under(version, args)
        log(f"Python {version}: exit {code}")
        first = first or code
    return first


def split_python_option(args: list[str]) -> tuple[list[str] | None, list[str]]:
    """The versions `--python A,B` (or `--python=A,B`) names, and the other arguments."""
    rest: list[str] = []
    versions: list[str] | None = None
    it = iter(args)
    for arg in it:
        if arg == "--python":
            value = next(it, "")
        elif arg.startswith("--python="):
            value = arg.partition("=")[2]
        else:
            rest.append(arg)
            continue
        versions = [v.strip() for v in value.split(",") if v.strip()]
    return versions, rest


def version_of(python: str | Path) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        major, minor = out.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return int(major), int(minor)


def find_python(version: str) -> str | None:
    """An interpreter of *version* (like "3.12"): pythonX.Y on PATH, else pyenv's newest."""
    wanted = tuple(map(int, version.split(".")))
    candidates = [p for p in [shutil.which(f"python{version}")] if p]
    pyenv = shutil.which("pyenv")
    if pyenv:
        try:
            root = subprocess.run([pyenv, "root"], capture_output=True, text=True,
                                  timeout=60, check=True).stdout.strip()  # fmt: skip
            bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True,
                                  text=True, timeout=60, check=True).stdout.split()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            root, bare = "", []
        mine = [v for v in bare if re.fullmatch(rf"{re.escape(version)}\.\d+", v)]
        for v in sorted(mine, key=lambda v: int(v.rsplit(".", 1)[1]), reverse=True):
            candidates.append(str(Path(root) / "versions" / v / "bin" / f"python{version}"))
    return next((c for c in candidates if version_of(c) == wanted), None)


def bench_pins() -> str:
    """`name==version` for every package installed in .venv but resolvent itself: the peers,
    their engines (uncalled-for under FastMCP) and what they run on (pydantic, starlette)
    stay at the versions the main run measured. Pins of packages the benchmark virtualenv
    does not install (the type checkers, the docs) are constraints only: pip ignores them."""
    freeze = subprocess.run(
        [str(venv_python()), "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pins = [ln for ln in freeze.splitlines() if re.fullmatch(r"[A-Za-z0-9_.-]+==\S+", ln)]
    return "".join(f"{ln}\n" for ln in pins if not ln.lower().startswith("resolvent=="))


def bench_under(version: str, args: list[str]) -> int:
    """Run the harness under CPython *version* in its own virtualenv, with .venv's peers."""
    tag = "py" + version.replace(".", "")
    stem = "quick" if "--quick" in args else "latest"
    extra: list[str] = []
    if not any(a == "--json" or a.startswith("--json=") for a in args):
        extra += ["--json", str(RESULTS / f"{stem}-{tag}.json")]
    if version_of(venv_python()) == tuple(map(int, version.split("."))):
        log(f"Python {version}: .venv's own interpreter")
        env_dir, python = VENV, venv_python()
    else:
        found = find_python(version)
        if found is None:
            log(f"no Python {version} here (python{version} on PATH, pyenv); install it first")
            return 2
        env_dir = BENCH_VENVS / f"py{version}"
        python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
        pins = bench_pins()
        stamp = env_dir / ".resolvent-installed"
        wanted = hashlib.sha256(PYPROJECT.read_bytes() + pins.encode()).hexdigest()
        have = stamp.read_text(encoding="utf-8").strip() if stamp.exists() else ""
        if have != wanted:
            log(f"Python {version} ({found}): installing into {env_dir.relative_to(ROOT)}")
            shutil.rmtree(env_dir, ignore_errors=True)
            code = run([found, "-m", "venv", env_dir])
            if code != 0:
                return code
            constraints = env_dir / "constraints.txt"
            constraints.write_text(pins, encoding="utf-8")
            code = pip_install(BENCH_EXTRAS, python, constraints)
            if code != 0:
                log(f"install under Python {version} failed (exit {code})")
                return code
            stamp.write_text(wanted + "\n", encoding="utf-8")
    if not any(a == "--plot" or a.startswith("--plot=") for a in args):
        # The chain plot of another interpreter is not published: keep it out of the tree.
        plot = (BENCH_VENVS / f"{stem}-{tag}-chain.png") if env_dir == VENV else None
        extra += ["--plot", str(plot or env_dir / f"{stem}-chain.png")]
    log(f"Python {version}: python -m benchmarks {' '.join([*args, *extra])}")
    return run([python, "-m", "benchmarks", *args, *extra], env=child_env(env_dir))


def action_docs(args: list[str]) -> int:
    env = child_env()
    env.setdefault("NO_MKDOCS_2_WARNING", "1")  # silence mkdocs-material's banner
    return run([venv_python(), "-m", "mkdocs", "build", "--strict", *args], env=env)


def mutate_config(module: str, tests: Sequence[str]) -> str:
    """The [tool.mutmut] section for one module (mutmut reads it from pyproject.toml)."""
    path = SRC_PACKAGE / module
    only = [f"src/resolvent/{module}/*.py"] if path.is_dir() else [f"src/resolvent/{module}.py"]
    apart = [f"src/resolvent/{other}.py" for other in MUTATE if other.startswith(f"{module}/")]

    def toml_list(items: Sequence[str]) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    # Each async test runs on asyncio only (MUTATE_ORDER drops its trio runs; a mutant that
    # only trio would catch counts as alive: the rate errs low), which halves what a
    # surviving mutant costs.
    args = ["-p", "no:cacheprovider", "-q", "-x"]
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {toml_list(only)}\n"
        f"do_not_mutate = {toml_list(apart)}\n"
        f"also_copy = {toml_list([*MUTATE_COPY, *(p.name for p in ROOT.glob('*.md'))])}\n"
        f"pytest_add_cli_args = {toml_list(args)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        # A mutant that makes a loop spin is stopped after (its tests' time + 3 s) x 4 of
        # CPU time, not mutmut's default x 30: minutes each on two shared cores.
        "timeout_multiplier = 2.0\ntimeout_constant = 3.0\n"
    )


# Appended to the copy's tests/conftest.py (never to the project's): mutmut hands a mutant's
# tests to pytest in no particular order, and pytest runs them in file order; fastest first,
# by the durations of mutmut's first run, a mutant that a quick test kills stops at once.
# It drops each test's run on trio (a `trio` among its parameters' ids), not `-k "not
# trio"`, which also drops every test whose name or file mentions trio.
MUTATE_ORDER = """

class _FastestFirst:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        import json

        def on_trio(item: pytest.Item) -> bool:
            callspec = getattr(item, "callspec", None)
            return callspec is not None and "trio" in callspec.id.split("-")

        dropped = [item for item in items if on_trio(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not on_trio(item)]
        stats = Path("mutmut-stats.json")  # mutmut runs the tests in its mutants/ folder
        if os.environ.get("MUTANT_UNDER_TEST") and stats.exists():
            took = json.loads(stats.read_text(encoding="utf-8"))["duration_by_test"]
            items.sort(key=lambda item: took.get(item.nodeid, 0.0))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_FastestFirst(), "resolvent-mutate-order")
    # A server a test starts in a subprocess (uvicorn) imports the mutated copy and
    # inherits which mutant is on, so it serves the mutant too (not the installed
    # package, which no mutant reaches). Not while mutmut records which tests reach which
    # function: that record lives in this process only.
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        here = str(Path("src").absolute())  # mutmut runs the tests in its mutants/ folder
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, before]))
"""


def mutate_module(
    module: str, venv_dir: Path = VENV, jobs: int = 0, *, again: bool = False
) -> dict[str, int] | None:
    """Run mutmut on *module* in a fresh copy of the project, with the mutmut of *venv_dir*
    and *jobs* workers (0: one per core); its counts, or None. With *again*, the last run's
    copy is kept if the source is unchanged since: the tests are copied in afresh and only
    its survivors, those no test reached and those not tried yet run again."""
    tests = MUTATE.get(module)
    if tests is None:
        path = SRC_PACKAGE / module
        if not (path.is_dir() or path.with_suffix(".py").exists()):
            log(f"mutate: no module {module!r} under src/resolvent (names: {', '.join(MUTATE)})")
            return None
        tests = ("tests",)
        log(f"mutate: {module} is not in MUTATE: its stats run covers the whole suite")
    work = MUTATE_WORK / module.replace("/", ".")
    configured = PYPROJECT.read_text(encoding="utf-8") + mutate_config(module, tests)
    mutmut = venv_dir / ("Scripts" if os.name == "nt" else "bin") / "mutmut"
    env = child_env(venv_dir)
    names: list[str] = []  # the mutants to run again; none: every one without a result
    if again and not (work / "mutants").is_dir():
        log(f"mutate {module}: no earlier run in {work.relative_to(ROOT)}: a full run")
        again = False
    elif again and mutated_digest(ROOT, module) != mutated_digest(work, module):
        log(f"mutate {module}: its source changed since the last run: a full run")
        again = False
    elif again and (work / "pyproject.toml").read_text(encoding="utf-8") != configured:
        log(f"mutate {module}: its tests in MUTATE changed since the last run: a full run")
        again = False
    if again:
        names = unsettled_mutants(work, venv_dir, module)
        log(f"mutate {module}: {len(names)} mutants again, with the tests as they are now")
        # A test changed since may reach other functions: mutmut records them all again.
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        # The rest of the package as it is now (the module's own files are unchanged).
        mutated = set(mutated_files(ROOT, module))
        for path in (ROOT / "src").rglob("*.py"):
            if path not in mutated and "__pycache__" not in path.parts:
                for base in (work, work / "mutants"):
                    (base / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, base / path.relative_to(ROOT))
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for name in ("src", *MUTATE_COPY):
            shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    # mutmut runs the tests in its own copy, mutants/, which it makes once.
    for base in (work, work / "mutants") if again else (work,):
        shutil.rmtree(base / "tests", ignore_errors=True)
        shutil.copytree(
            ROOT / "tests", base / "tests", ignore=shutil.ignore_patterns("__pycache__")
        )
        for page in ROOT.glob("*.md"):  # RELIABILITY.md, MUTANTS.md: tests read their promises
            shutil.copy2(page, base / page.name)
        (base / "pyproject.toml").write_text(configured, encoding="utf-8")
        with (base / "tests" / "conftest.py").open("a", encoding="utf-8") as conftest:
            conftest.write(MUTATE_ORDER)
    workers = str(jobs or os.cpu_count() or 1)
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    log(f"mutate {module}: mutmut run in {work.relative_to(ROOT)} (tests: {' '.join(tests)})")
    started = time.monotonic()
    with (work / "mutmut-run.log").open("w", encoding="utf-8") as out:  # its progress bar
        proc = subprocess.run(
            [*nice, str(mutmut), "run", "--max-children", workers, *names], cwd=work, env=env,
            check=False, stdout=out, stderr=subprocess.STDOUT,
        ) if names or not again else subprocess.CompletedProcess((), 0)  # fmt: skip
    if proc.returncode != 0:
        log(f"mutate {module}: mutmut run failed (exit {proc.returncode}); its output is in "
            f"{(work / 'mutmut-run.log').relative_to(ROOT)}")  # fmt: skip
        return None
    subprocess.run(
        [str(mutmut), "export-cicd-stats"], cwd=work, env=env, check=False,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    import json

    counts: dict[str, int] = json.loads(
        (work / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8")
    )
    results = subprocess.run(
        [str(mutmut), "results"], cwd=work, env=env, check=False, capture_output=True, text=True,
    ).stdout  # fmt: skip
    survivors = [line.strip() for line in results.splitlines() if line.strip()]
    listed = equivalent_mutants().get(module, set())
    counts["equivalent"] = 0
    if survivors:
        print(f"{module}: not killed (see `mutmut show NAME` in {work.relative_to(ROOT)}):")
        names = [line.rpartition(": ")[0] for line in survivors if line.endswith(": survived")]
        diffs = mutant_diffs(work, venv_dir, names)
        for line in survivors:
            name, _, status = line.rpartition(": ")
            if status == "survived":
                shown = diffs.get(name, "")
                if is_listed(listed, function_of(module, name), shown):
                    counts["equivalent"] += 1
                    line += " (equivalent, MUTANTS.md)"
                else:
                    line += f"\n        {function_of(module, name)}  {mutated_line(shown)}"
            print(f"    {line}")
    counts["seconds"] = round(time.monotonic() - started)
    return counts


# `mutmut show NAME` for many mutants in one process: mutmut's start-up takes seconds, and a
# module has up to a hundred survivors to show.
SHOW_MUTANTS = """
import contextlib, io, json, sys
from mutmut.__main__ import show

diffs = {}
for name in json.load(sys.stdin):
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        show.main([name], standalone_mode=False)
    diffs[name] = shown.getvalue()
json.dump(diffs, sys.stdout)
"""


def mutant_diffs(work: Path, venv_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """What `mutmut show` prints for each of *names*, the mutants of the run in *work*."""
    if not names:
        return {}
    import json

    python = venv_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    proc = subprocess.run(
        [str(python), "-c", SHOW_MUTANTS], cwd=work, env=child_env(venv_dir), check=False,
        input=json.dumps(list(names)), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        log(f"mutmut show failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        return {}
    diffs: dict[str, str] = json.loads(proc.stdout)
    return diffs


def mutated_files(root: Path, module: str) -> list[Path]:
    """The files of *module* that mutmut mutates, in the project (or copy) at *root*: the
    module's file, or its package's files but those `MUTATE` lists apart."""
    path = root / "src" / "resolvent" / module
    if not path.is_dir():
        return [path.with_suffix(".py")]
    apart = {root / "src" / "resolvent" / f"{other}.py" for other in MUTATE}
    return sorted(set(path.glob("*.py")) - apart)


def mutated_digest(root: Path, module: str) -> str:
    """One hash of *module*'s mutated files at *root* (their names and bytes)."""
    digest = hashlib.sha256()
    for path in mutated_files(root, module):
        content = path.read_bytes() if path.exists() else b"(none)"
        digest.update(path.name.encode() + b"\0" + content)
    return digest.hexdigest()


def unsettled_mutants(work: Path, venv_dir: Path, module: str) -> list[str]:
    """The mutants of *module*'s run in *work* that no test killed yet: survived (but for
    those MUTANTS.md lists as equivalent), reached by no test, not tried (a run stopped
    part way) or suspicious."""
    mutmut = venv_dir / ("Scripts" if os.name == "nt" else "bin") / "mutmut"
    results = subprocess.run(
        [str(mutmut), "results"], cwd=work, env=child_env(venv_dir), check=False,
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    found = [line.strip().rpartition(": ") for line in results.splitlines()]
    unsettled = ("survived", "no tests", "not checked", "suspicious")
    names = [name for name, _, status in found if name and status in unsettled]
    listed = equivalent_mutants().get(module, set())
    survived = [name for name, _, status in found if status == "survived"]
    diffs = mutant_diffs(work, venv_dir, survived) if listed else {}
    return [
        name
        for name in names
        if not is_listed(listed, function_of(module, name), diffs.get(name, ""))
    ]


def equivalent_mutants() -> dict[str, set[tuple[str, str]]]:
    """The survivors MUTANTS.md lists as equivalent, by module: (function, mutated line)
    pairs from its ```mutants blocks (a mutant's number changes with its function's code,
    its line does not)."""
    listed: dict[str, set[tuple[str, str]]] = {}
    text = (ROOT / "MUTANTS.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```mutants\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                module, function, mutated = line.split(maxsplit=2)
                listed.setdefault(module, set()).add((function, " ".join(mutated.split())))
    return listed


# A line of a ```mutants block whose mutated part is this covers every mutant of its
# function (a glob: ``sqlite.SqliteStore.*``) that only changes the letter case of an SQL
# statement: SQL's keywords and unquoted names are case-insensitive.
SQL_CASE = "(letter case of SQL)"
_SQL_WORD = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|BEGIN|COMMIT|ROLLBACK|PRAGMA|FROM|WHERE|SET|"
    r"VALUES|AND)\b"
)


def is_listed(listed: set[tuple[str, str]], function: str, shown: str) -> bool:
    """Whether MUTANTS.md lists the mutant ``mutmut show`` printed as *shown* (of
    *function*) as equivalent: by its line, or as a change of SQL's letter case."""
    if (function, mutated_line(shown)) in listed:
        return True
    import fnmatch

    rules = [glob for glob, line in listed if line == SQL_CASE]
    if not any(fnmatch.fnmatchcase(function, glob) for glob in rules):
        return False
    lines = [ln for ln in shown.splitlines() if ln[:1] in "-+" and ln[:2] not in ("--", "++")]
    removed = " ".join(ln[1:] for ln in lines if ln.startswith("-"))
    added = " ".join(ln[1:] for ln in lines if ln.startswith("+"))
    return removed != added and removed.lower() == added.lower() and bool(_SQL_WORD.search(removed))


def function_of(module: str, mutant: str) -> str:
    """What MUTANTS.md calls a mutant's function: ``SessionTable.acquire`` for
    ``resolvent.mcp._sessions.xǁSessionTableǁacquire__mutmut_6`` (with its file first,
    ``sqlite.SqliteStore.load``, in a package)."""
    where, _, name = mutant.rpartition(".")
    name = name.rpartition("__mutmut_")[0]
    name = ".".join(name[2:].split("ǁ")) if name.startswith("xǁ") else name.removeprefix("x_")
    inside = where.removeprefix("resolvent." + module.replace("/", ".")).lstrip(".")
    return f"{inside}.{name}" if inside else name


def mutated_line(shown: str) -> str:
    """The changed code of a mutant, from ``mutmut show``'s diff, on one line; for a mutant
    that only deletes (an argument), ``deleted: `` and the line it deletes."""
    lines = shown.splitlines()
    added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("++")]
    if not "".join(added).strip():
        removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("--")]
        return "deleted: " + " ".join(" ".join(removed).split())
    return " ".join(" ".join(added).split())


def killed_percent(counts: dict[str, int]) -> float:
    """Mutants killed (a test failed, or they hung) out of every mutant tried but those
    MUTANTS.md lists as equivalent."""
    tried = counts["total"] - counts.get("skipped", 0) - counts.get("equivalent", 0)
    killed = counts["killed"] + counts.get("timeout", 0)
    return 100.0 * killed / tried if tried else 100.0


def kill_rate(counts: dict[str, int]) -> str:
    tried = counts["total"] - counts.get("skipped", 0)
    killed = counts["killed"] + counts.get("timeout", 0)
    equivalent = counts.get("equivalent", 0)
    return (
        f"{killed}/{tried - equivalent} killed ({killed_percent(counts):.1f}%; "
        f"{equivalent} more equivalent), {counts['survived'] - equivalent} alive, "
        f"{counts.get('no_tests', 0)} reached by no test, {counts['seconds']} s"
    )


def mutate(
    modules: Sequence[str], venv_dir: Path = VENV, jobs: int = 0, *, again: bool = False
) -> int:
    """Mutation-test *modules* one after the other (*again*: see `mutate_module`): 0 when
    each kills at least MUTATE_FLOOR percent of its mutants, else 1."""
    rates: dict[str, str] = {}
    failed = 0
    for module in modules:
        counts = mutate_module(module, venv_dir, jobs, again=again)
        if counts is None:
            failed = 1
            continue
        rates[module] = kill_rate(counts)
        log(f"mutate {module}: {rates[module]}")
        if killed_percent(counts) < MUTATE_FLOOR:
            rates[module] += f": UNDER {MUTATE_FLOOR:.0f}%"
            failed = 1
    if rates:
        print("\nkill rate per module:")
        for module, rate in rates.items():
            print(f"  {module:16} {rate}")
    return failed


def action_mutate(args: list[str]) -> int:
    jobs, again = 0, False
    while args[:1] in (["--jobs"], ["--again"]):
        if args[0] == "--again":
            again, args = True, args[1:]
        elif len(args) > 1 and args[1].isdigit():
            jobs, args = int(args[1]), args[2:]
        else:
            log("mutate: --jobs takes a number of workers, e.g. --jobs 2")
            return 2
    modules = [a.removesuffix(".py").removeprefix("src/resolvent/") for a in args] or list(MUTATE)
    return mutate(modules, jobs=jobs, again=again)


ACTIONS = {
    "demo": action_demo,
    "test": action_test,
    "check": action_check,
    "bench": action_bench,
    "docs": action_docs,
    "mutate": action_mutate,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(USAGE)
        return 0 if argv else 2
    action = ACTIONS.get(argv[0])
    if action is None:
        print(f"dev.py: unknown command {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    if sys.version_info < MIN_PYTHON:
        log(f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer is required")
        return 2
    ensure_env(EXTRAS[argv[0]])
    return action(argv[1:])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(128 + signal.SIGINT)
