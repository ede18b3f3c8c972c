#!/usr/bin/env python3
"""CI jobs beyond the main one (`dev.py test`, `check`, `docs`). Standard library only.

Usage:
    python3 .ci/jobs.py floors          the suite on the lowest declared dependencies
    python3 .ci/jobs.py python 3.12     the suite on another CPython (skipped, loudly, if absent)
    python3 .ci/jobs.py pythons         the suite on every declared CPython but this one
    python3 .ci/jobs.py package         build, check and smoke-test the sdist and the wheel
    python3 .ci/jobs.py slow            the tests marked slow (the default run leaves them out),
                                        then the teardown shield's both ways (newest anyio, trio)
    python3 .ci/jobs.py peers           the tests that need the benchmark peers (the `bench` extra)
    python3 .ci/jobs.py instructions    instructions per call (callgrind) against the baseline
    python3 .ci/jobs.py instructions --update WHY
                                        count the baseline again, in the job's virtualenv
    python3 .ci/jobs.py mutate [--changed BASE]
                                        mutation testing (MUTANTS.md) of every module dev.py
                                        lists, or of those the change since BASE touches

Each job makes its own virtualenv under .venv-ci/ and installs only what it needs from
pyproject.toml (the package, the `test` extra, the extras the job is about); only `peers`
needs the benchmark peers, and none the type checkers or the docs tools. Tests needing a
package a job lacks are skipped with the reason. Exit status: 0 when the job passed or was
skipped, else the first failure's.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import dev  # noqa: E402  (one interpreter finder, one mutation runner for dev.py and CI)
from dev import find_python  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
JOBS = ROOT / ".venv-ci"
PYTEST = ("-m", "pytest", "-p", "no:cacheprovider", "-q", "-ra")
# Every extra the suite covers, with the test tools: what `dev.py test` installs.
SUITE_EXTRAS = ("mcp", "starlette", "fastapi", "redis", "trio", "test")


def log(msg: str) -> None:
    print(f"jobs.py: {msg}", file=sys.stderr, flush=True)


def run(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> int:
    started = time.monotonic()
    code = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, check=False).returncode
    if code != 0:
        shown = " ".join(map(str, cmd))
        shown = shown if len(shown) < 200 else shown[:200] + " ..."
        log(f"exit {code} after {time.monotonic() - started:.0f} s: {shown}")
    return code


def must(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
    code = run(*cmd, env=env, cwd=cwd)
    if code != 0:
        raise SystemExit(code)


def make_venv(name: str, python: str | Path) -> Path:
    """A fresh virtualenv .venv-ci/NAME made by *python*; returns its interpreter."""
    path = JOBS / name
    shutil.rmtree(path, ignore_errors=True)
    if Path(python).resolve() == Path(sys.executable).resolve():
        venv.create(path, with_pip=True)
    else:
        must(python, "-m", "venv", path)
    return path / "bin" / "python"


def pip(py: Path, *args: str | Path) -> None:
    must(py, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off",
         "--quiet", *args)  # fmt: skip


def show_versions(py: Path) -> None:
    """Log the installed versions of the packages a job is about."""
    command = [str(py), "-m", "pip", "list", "--disable-pip-version-check", "--format", "freeze"]
    listed = subprocess.run(command, capture_output=True, text=True, check=True)
    about = ("anyio", "trio", "pydantic", "typing_extensions", "mcp", "starlette", "fastapi",
             "uvicorn", "coredis")  # fmt: skip
    lines = listed.stdout.split()
    log("installed: " + ", ".join(ln for ln in lines if ln.split("==")[0].lower() in about))


def env_without_source() -> dict[str, str]:
    """The environment for a job's own interpreter: nothing of the outer virtualenv."""
    env = dict(os.environ)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    return env


# ------------------------------------------------------------------ interpreters


def declared_pythons() -> list[str]:
    """The CPython versions pyproject's classifiers declare, oldest first."""
    found = []
    for classifier in PYPROJECT["project"]["classifiers"]:
        match = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier)
        if match:
            found.append(match[1])
    return sorted(found, key=lambda v: int(v.split(".")[1]))


# ------------------------------------------------------------------ jobs


def job_python(version: str) -> int:
    """The suite on CPython *version*: every integration (mcp, Starlette, the Redis store
    with a real Valkey server), so no test of a declared feature is skipped there."""
    python = find_python(version)
    if python is None:
        log(f"SKIPPED: no Python {version} on this machine (python{version} on PATH, pyenv)")
        return 0
    log(f"Python {version}: {python}")
    py = make_venv(f"py{version}", python)
    pip(py, "-e", f".[{','.join(SUITE_EXTRAS)}]")
    return run(py, *PYTEST, env=env_without_source())


def job_pythons() -> int:
    """Every declared CPython but the one running this (the main job's)."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    first = 0
    for version in declared_pythons():
        if version == here:
            log(f"Python {version}: the main job's own, not run again")
            continue
        started = time.monotonic()
        code = job_python(version)
        log(f"Python {version}: exit {code} in {time.monotonic() - started:.0f} s")
        first = first or code
    return first


# The tests of the teardown shield (resolvent._runtime.shield). Where anyio's and trio's
# cancel-scope trees have the private shape it reads, it links its scope into them (the
# fast path); elsewhere it enters a cancel scope before any setup (the fallback). Both run
# on the newest anyio and trio (`slow`) and on the lowest declared (`floors`).
_SHIELD_TESTS = (
    "tests/test_lifecycle_teardown_shield.py",
    "tests/test_lifecycle_direct.py",
    "tests/test_lifecycle_resources.py",
)


def run_shield_tests(py: Path) -> int:
    """The shield's tests in *py*'s virtualenv, as they are (the fast path, where the
    installed anyio or trio has its shape) and again with ``--eager-shield``, which forces
    the fallback (tests/conftest.py)."""
    show_versions(py)
    fast = run(py, *PYTEST, *_SHIELD_TESTS, env=env_without_source())
    fallback = run(py, *PYTEST, "--eager-shield", *_SHIELD_TESTS, env=env_without_source())
    return fast or fallback


def floors(requirements: list[str]) -> list[str]:
    """`name==X` for each `name>=X` in *requirements* (markers and extras dropped)."""
    pins = []
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", requirement)
        if match:
            pins.append(f"{match[1]}=={match[2]}")
    return pins


# Run in the floors virtualenv: what the wheels in a folder require (>=) of the given
# names, by their Requires-Dist with markers evaluated for this interpreter.
_NEEDS = r"""
import sys, zipfile
from pathlib import Path
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
folder, names = Path(sys.argv[1]), {canonicalize_name(n) for n in sys.argv[2:]}
for wheel in sorted(folder.glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        [meta] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(meta).decode()
    for line in text.splitlines():
        if line.startswith("Requires-Dist: "):
            req = Requirement(line.partition(": ")[2])
            applies = not req.marker or req.marker.evaluate({"extra": ""})
            if canonicalize_name(req.name) in names and applies:
                for spec in req.specifier:
                    if spec.operator == ">=":
                        print(f"{req.name}>={spec.version}")
"""


def lowest_together(py: Path, pins: list[str], extra: list[str]) -> list[str]:
    """*pins* (`name==X`) raised until every one of them and of *extra* accepts the
    others: what each pinned release requires (>=) of the rest, repeated until nothing
    moves. Only the pinned names are looked at: the resolver fills in the rest."""
    names = [pin.partition("==")[0] for pin in pins]
    while True:
        folder = Path(tempfile.mkdtemp(prefix="floors-"))
        try:
            must(py, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
                 "--no-deps", "--only-binary", ":all:", "-d", folder, *pins, *extra)  # fmt: skip
            found = subprocess.run([str(py), "-c", _NEEDS, str(folder), *names],
                                   capture_output=True, text=True, check=True)  # fmt: skip
            needs = found.stdout.split()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        raised = [pick_floor(pin, needs) for pin in pins]
        if raised == pins:
            return pins
        pins = raised


def pick_floor(pin: str, needs: list[str]) -> str:
    """*pin* (`name==X`) raised to what *needs* demands of the same name."""
    name, _, version = pin.partition("==")
    best = tuple(int(p) for p in re.findall(r"\d+", version))
    chosen = version
    for need in needs:
        other, _, at_least = need.partition(">=")
        if other.replace("_", "-").lower() == name.replace("_", "-").lower():
            parts = tuple(int(p) for p in re.findall(r"\d+", at_least))
            if parts > best:
                best, chosen = parts, at_least
    return f"{name}=={chosen}"


def job_floors() -> int:
    """The suite on the lowest version of every runtime dependency pyproject declares.

    Two rounds in one virtualenv, on the oldest declared Python that is here: the core
    and the starlette extra at their floors (without mcp: its floor release needs a
    newer anyio and pydantic than the core's floors); then the mcp extra at its floor,
    with the core's dependencies at the lowest versions that release (and what it
    depends on, by pip's conflict report) accepts. A third, short round adds the redis
    extra at its floor (coredis needs a newer anyio still, so it is not in round 2) and
    a real Valkey server, and runs the state store's tests.
    After round 1, the teardown shield's tests run on anyio's floor and trio's, with its
    fast path and its fallback (`run_shield_tests`).
    The test tools' own floors come from the `test` extra.
    """
    python = next((p for p in map(find_python, declared_pythons()) if p), sys.executable)
    extras = PYPROJECT["project"]["optional-dependencies"]
    core = floors(PYPROJECT["project"]["dependencies"])
    web = floors(extras["starlette"])
    py = make_venv("floors", python)
    constraints = JOBS / "floors-constraints.txt"

    constraints.write_text("\n".join(core + web) + "\n", encoding="utf-8")
    log(f"round 1 ({python}): {', '.join(core + web)}; no mcp")
    pip(py, "-c", constraints, "-e", ".[starlette,test]")
    show_versions(py)
    first = run(py, *PYTEST, env=env_without_source())
    # The teardown shield on anyio's floor and trio's (the `trio` extra's), both ways;
    # then the trio the resolver chose again, for the rounds below.
    [trio_floor] = floors(extras["trio"])
    chosen = subprocess.run([str(py), "-c", "import trio; print(trio.__version__)"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    log(f"round 1: the shield's tests on {trio_floor}")
    pip(py, "-c", constraints, trio_floor)
    shield = run_shield_tests(py)
    pip(py, "-c", constraints, f"trio=={chosen}")

    [mcp_floor] = floors(extras["mcp"])
    # The web extra is left to the resolver: the MCP SDK's own HTTP stack needs a newer one.
    pins = [*lowest_together(py, core, [mcp_floor]), mcp_floor]
    for _ in range(8):
        constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
        log(f"round 2: trying {', '.join(pins)}")
        install = subprocess.run(
            [str(py), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar",
             "off", "-c", str(constraints), "-e", ".[mcp,starlette,test]"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if install.returncode == 0:
            break
        # A package further down (the SDK's HTTP client, say) needs more than the pinned
        # releases do: raise the pins to what pip's conflict report says is needed.
        needs = [
            f"{name}>={version}"
            for name, spec in re.findall(r"depends on ([A-Za-z0-9_.-]+)([^;\n]*)", install.stdout)
            for version in re.findall(r">=\s*([0-9][^,;\s]*)", spec)
        ]
        raised = [pick_floor(pin, needs) for pin in pins]
        if raised == pins:
            print(install.stdout[-4000:], install.stderr[-4000:], sep="\n", file=sys.stderr)
            return install.returncode
        pins = raised
    else:
        log("round 2: no installable set of floors found")
        return 1
    show_versions(py)
    second = run(py, *PYTEST, env=env_without_source())

    [redis_floor] = floors(extras["redis"])
    pins = [*lowest_together(py, pins, [redis_floor]), redis_floor]
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    log(f"round 3: {', '.join(pins)}; the state store's tests")
    pip(py, "-c", constraints, "-e", ".[mcp,starlette,redis,test]")
    show_versions(py)
    stores = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_state*.py"))
    third = run(py, *PYTEST, *stores, env=env_without_source())
    return first or shield or second or third


def job_package() -> int:
    """Build the sdist and the wheel (the wheel from the sdist), check their metadata and
    contents, install the wheel with the mcp extra into a clean virtualenv, and run the
    README's examples and the MCP guide's first server against it, not the source tree."""
    tools = make_venv("package-tools", sys.executable)
    pip(tools, "build", "twine")
    dist = JOBS / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    must(tools, "-m", "build", "--outdir", dist, ROOT)
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        log(f"expected one sdist and one wheel, got {[p.name for p in dist.iterdir()]}")
        return 1
    must(tools, "-m", "twine", "check", "--strict", sdists[0], wheels[0])
    must(tools, "-c", _CHECK_CONTENTS, sdists[0], wheels[0], PYPROJECT["project"]["version"])

    py = make_venv("wheel", sys.executable)
    pip(py, f"{wheels[0]}[mcp]", *_SMOKE_TOOLS)
    env = {**env_without_source(), "RESOLVENT_TEST_INSTALLED": "1"}
    return run(py, *PYTEST, *_SMOKE_TESTS, env=env)


# Enough to run the two test files below against the installed wheel.
_SMOKE_TOOLS = ("pytest>=8", "pytest-timeout>=2.3", "trio>=0.26", "hypothesis>=6.100", "sybil>=9")
_SMOKE_TESTS = (
    "tests/test_readme.py",
    "tests/test_docs.py::test_code_blocks_run[README.md]",
    "tests/test_docs.py::test_code_blocks_run[docs/mcp.md]",
)

_CHECK_CONTENTS = r"""
import sys, tarfile, zipfile
sdist, wheel, version = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
assert "resolvent/py.typed" in names, "the wheel lacks py.typed"
assert "resolvent/mcp/__init__.py" in names, "the wheel lacks resolvent.mcp"
assert not [n for n in names if n.startswith("tests/")], "the wheel ships the tests"
assert any(n.endswith(f"resolvent-{version}.dist-info/METADATA") for n in names), names
meta = zipfile.ZipFile(wheel).read(f"resolvent-{version}.dist-info/METADATA").decode()
for line in ("Requires-Dist: anyio", "Provides-Extra: mcp", "License-Expression: Apache-2.0"):
    assert line in meta, f"METADATA lacks {line!r}"
members = tarfile.open(sdist).getnames()
for need in ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "src/resolvent/py.typed"):
    assert any(m.endswith("/" + need) for m in members), f"the sdist lacks {need}"
print(f"sdist ({len(members)} files) and wheel ({len(names)} files) have what they need")
"""


def job_slow() -> int:
    """The tests marked `slow`, which the default run (`dev.py test`, the other jobs) leaves
    out, with every extra the suite covers. None marked is a pass. Then the teardown
    shield's tests on the newest anyio and trio, with its fast path and its fallback."""
    py = make_venv("slow", sys.executable)
    pip(py, "-e", f".[{','.join(SUITE_EXTRAS)}]")
    code = run(py, *PYTEST, "-m", "slow", env=env_without_source())
    if code == 5:  # pytest: no test collected
        log("no test is marked slow")
        code = 0
    shield = run_shield_tests(py)
    return code or shield


# The tests that skip without the `bench` extra: the benchmarks compute what the hand-written
# code does, and `resolvent bench --plot` draws.
_PEER_TESTS = ("tests/test_benchmarks_verify.py", "tests/test_bench.py")


def job_peers() -> int:
    """The tests that need the benchmark peers and matplotlib, which `dev.py test` does not
    install, with every extra the suite covers and the `bench` extra."""
    py = make_venv("peers", sys.executable)
    pip(py, "-e", f".[{','.join((*SUITE_EXTRAS, 'bench'))}]")
    return run(py, *PYTEST, *_PEER_TESTS, env=env_without_source())


def job_instructions(update: str | None = None) -> int:
    """The instruction-count guard: every path of S1-S7, the MCP tool call and the FastAPI
    route counted under callgrind (`benchmarks.instructions`), failing when a figure rose
    more than 3% over the committed baseline. It installs valgrind if it is missing, and
    the package with exactly the versions the baseline was counted with; under another
    Python than the baseline's it is skipped, loudly (the counts differ by interpreter).
    With *update* (the reason), it counts the baseline again in that same virtualenv: a
    development virtualenv with more packages in it reads other figures (FastAPI's route
    28% more instructions here, for the hand-written route as well)."""
    baseline = json.loads(
        (ROOT / "benchmarks" / "results" / "instructions-baseline.json").read_text(encoding="utf-8")
    )
    here = platform.python_version()
    if baseline["python"] != here and update is None:
        log(f"SKIPPED: the baseline was counted on Python {baseline['python']}, this is {here}")
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        log("installing valgrind (apt-get)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if run("apt-get", "install", "-y", "-q", "valgrind", env=env) != 0:
            must("apt-get", "update", "-q", env=env)
            must("apt-get", "install", "-y", "-q", "valgrind", env=env)
    py = make_venv("instructions", sys.executable)
    constraints = JOBS / "instructions-constraints.txt"
    pins = [f"{name}=={version}" for name, version in baseline["versions"].items() if version]
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    pip(py, "-c", constraints, "-e", ".[mcp,fastapi]")
    show_versions(py)
    mode = ["--check"] if update is None else ["--update", update]
    return run(py, "-m", "benchmarks.instructions", *mode, env=env_without_source())


def changed_modules(base: str) -> list[str]:
    """The modules of dev.py's MUTATE whose source differs from *base* (a commit)."""
    listed = subprocess.run(
        ["git", "diff", "--name-only", base, "--"], cwd=ROOT, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        raise SystemExit(f"jobs.py mutate: git diff against {base!r} failed: {listed.stderr}")
    found: list[str] = []
    for path in listed.stdout.split():
        owners = [  # the module, or the package holding it (the most specific one listed)
            module
            for module in dev.MUTATE
            if path == f"src/resolvent/{module}.py" or path.startswith(f"src/resolvent/{module}/")
        ]
        if owners:
            found.append(max(owners, key=len))
    return [module for module in dev.MUTATE if module in found]


def job_mutate(base: str | None = None) -> int:
    """Mutation testing (`dev.py mutate`) of the modules MUTANTS.md lists, or, with *base*,
    of those whose source changed since that commit; it fails when a module's tests kill
    under 90% of its mutants (dev.MUTATE_FLOOR). Only source changes choose a module: a
    change to tests alone is measured by the full run."""
    modules = list(dev.MUTATE) if base is None else changed_modules(base)
    if not modules:
        log(f"no module of MUTANTS.md changed since {base}: nothing to mutate")
        return 0
    log(f"mutating {', '.join(modules)}")
    py = make_venv("mutate", sys.executable)
    pip(py, "-e", f".[{','.join((*SUITE_EXTRAS, 'mutate'))}]")
    return dev.mutate(modules, venv_dir=JOBS / "mutate")


def main(argv: list[str]) -> int:
    if argv[:1] == ["floors"] and len(argv) == 1:
        return job_floors()
    if argv[:1] == ["python"] and len(argv) == 2:
        return job_python(argv[1])
    if argv[:1] == ["pythons"] and len(argv) == 1:
        return job_pythons()
    if argv[:1] == ["package"] and len(argv) == 1:
        return job_package()
    if argv[:1] == ["slow"] and len(argv) == 1:
        return job_slow()
    if argv[:1] == ["peers"] and len(argv) == 1:
        return job_peers()
    if argv[:1] == ["instructions"] and len(argv) == 1:
        return job_instructions()
    if argv[:2] == ["instructions", "--update"] and len(argv) == 3:
        return job_instructions(argv[2])
    if argv[:1] == ["mutate"] and len(argv) == 1:
        return job_mutate()
    if argv[:2] == ["mutate", "--changed"] and len(argv) == 3:
        return job_mutate(argv[2])
    print(__doc__.split("\n\n", 2)[1] if __doc__ else "", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
