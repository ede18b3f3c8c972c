#!/usr/bin/env python3
"""Developer entry point for resolvent. Standard library only.

Usage:
    python3 dev.py demo          run examples/demo.py
    python3 dev.py test [ARGS]   run the test suite (ARGS go to pytest)
    python3 dev.py check         ruff check, ruff format --check, mypy, pyright
    python3 dev.py bench [ARGS]  run the benchmarks (ARGS go to python -m benchmarks)
    python3 dev.py docs          build the documentation (mkdocs build --strict)

The first run creates .venv next to this file and installs the project into it,
editable: `demo` needs only the mcp extra (the package and the MCP SDK); the other
commands add the dev extra (test runners, type checkers, docs, benchmark peers).
It reinstalls whenever pyproject.toml changes. Every command then runs with the
virtualenv's Python, and dev.py exits with that command's exit code.
"""

from __future__ import annotations

import hashlib
import os
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
DEMO_EXTRAS = ("mcp",)
ALL_EXTRAS = ("dev", "mcp")
WHAT = {
    "mcp": "the MCP SDK",
    "dev": "the development tools: pytest, ruff, mypy, pyright, mkdocs, benchmark peers",
}
MIN_PYTHON = (3, 11)

USAGE = __doc__.split("\n\n", 2)[1] if __doc__ else ""


def log(msg: str) -> None:
    print(f"dev.py: {msg}", file=sys.stderr, flush=True)


def venv_bin() -> Path:
    return VENV / ("Scripts" if os.name == "nt" else "bin")


def venv_python() -> Path:
    return venv_bin() / ("python.exe" if os.name == "nt" else "python")


def child_env() -> dict[str, str]:
    """Environment for commands run inside the virtualenv (as if activated)."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = str(venv_bin()) + os.pathsep + env.get("PATH", "")
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
    if len(stamp) == 1:  # written before the demo installed less: everything
        return set(ALL_EXTRAS)
    return set(stamp[1:])


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


def pip_install(extras: Sequence[str]) -> int:
    """Install the project with *extras*, printing pip's steps one short line each."""
    cmd: list[str | Path] = [
        venv_python(), "-m", "pip", "install",
        "--disable-pip-version-check", "--progress-bar", "off",
        "-e", f".[{','.join(extras)}]",
    ]  # fmt: skip
    started = time.monotonic()
    collected = 0
    try:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=ROOT,
            env=child_env(),
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


def ensure_env(extras: Sequence[str] = ALL_EXTRAS) -> None:
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
    return run([venv_python(), "-m", "benchmarks", *args], env=child_env())


def action_docs(args: list[str]) -> int:
    env = child_env()
    env.setdefault("NO_MKDOCS_2_WARNING", "1")  # silence mkdocs-material's banner
    return run([venv_python(), "-m", "mkdocs", "build", "--strict", *args], env=env)


ACTIONS = {
    "demo": action_demo,
    "test": action_test,
    "check": action_check,
    "bench": action_bench,
    "docs": action_docs,
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
    ensure_env(DEMO_EXTRAS if action is action_demo else ALL_EXTRAS)
    return action(argv[1:])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(128 + signal.SIGINT)
