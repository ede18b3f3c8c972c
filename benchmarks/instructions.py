"""Instructions per call, counted with callgrind: every path of S1-S7, the MCP tool call
and the FastAPI route, and the guard that compares them with a committed baseline.

    python -m benchmarks.instructions                      print the table
    python -m benchmarks.instructions --only S1,S2 --paths hand-written,run
    python -m benchmarks.instructions --check              exit 1 if a figure rose > 3%
    python -m benchmarks.instructions --update "WHY"       write the baseline again
    python -m benchmarks.instructions --json FILE          every figure, as JSON

The machine's load moves a time; it does not move the number of instructions a call runs.
One process runs under ``valgrind --tool=callgrind`` with instrumentation off while it
imports, builds, verifies and warms every implementation (``--warm`` calls each, default
1,000), which is most of its work; then instrumentation goes on and each implementation
runs 50 more calls and then ``--calls`` counted calls (default: see `CALLS`) between two
markers (``os.getppid()``, on which callgrind dumps its counters). The figure is the
instructions of the counted calls divided by their number: what one warm call costs, the
loop that awaits it included (the same few instructions for every implementation). The
garbage collector is off while counting, hash randomization is off (``PYTHONHASHSEED=0``),
and so two runs of the same code read the same figures to well under 0.1%.

The committed baseline (`BASELINE`) holds the figures, the interpreter and the versions of
every package they were counted with. ``--check`` fails (exit 1) when any figure is more
than `TOLERANCE` over its baseline, or missing; the CI job (``.ci/jobs.py instructions``)
installs exactly the baseline's versions, and skips loudly under another Python, where the
figures differ anyway. A baseline is only written again by ``--update`` with the reason,
kept in the file, in a commit whose message says why; count it in the job's own virtualenv
(``python3 .ci/jobs.py instructions --update "WHY"``), whose packages are the ones CI has.

`count` is the function behind the command: ``count(["S1", "S2"], ["run"])`` returns
``{"S1": {"run": 7503.2}, ...}`` (it starts valgrind itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).resolve().parent / "results" / "instructions-baseline.json"
TOLERANCE = 0.03
WARM_CALLS = 1_000

SCENARIOS = ("S1", "S2", "S3 chain 100", "S4", "S5 inline", "S6", "S7")  # PATH_GRAPHS' keys
"""The per-call scenarios, each on every path in `PATHS`."""
PATHS = (
    "hand-written",
    "run",
    "call.resolve",
    "interpreter",
    "hand-written concurrent",
    "concurrent",
    "hand-written MCP legacy",
    "MCP ask legacy",
    "hand-written MCP 2026-07-28",
    "MCP ask 2026-07-28",
)
"""The paths of S1-S7 (see `benchmarks.paths` and `benchmarks.mcp_ask`), each beside the
hand-written code it is compared with (`FLOORS`)."""
FLOORS = {
    "concurrent": "hand-written concurrent",
    "MCP ask legacy": "hand-written MCP legacy",
    "MCP ask 2026-07-28": "hand-written MCP 2026-07-28",
}
"""The floor of each path that is not compared with plain hand-written code:
``hand-written concurrent`` awaits independent resolvers together (``asyncio.gather``);
``hand-written MCP`` is the graph computed in the body of a tool called the same way."""
OTHERS = {"MCP": ("hand-written", "resolvent"), "FastAPI": ("hand-written", "resolvent")}
"""Scenarios with their own implementations: the MCP tool call in process, the FastAPI route."""

BUDGET = 40_000_000
"""Instructions to count per implementation: its counted calls are this divided by its
figure in the baseline (at most `MAX_CALLS`, at least `MIN_CALLS`), so a path that runs
more per call (the interpreter, concurrent branches, 50 leaves) gets fewer calls and the
run stays short. The baseline records each count, and ``--check`` makes the same ones."""
MAX_CALLS = 10_000
MIN_CALLS = 20
GUESS = 200_000  # per call, for what the baseline does not hold yet


# Packages whose versions the baseline records (and CI installs): what a counted call runs.
PACKAGES = ("anyio", "sniffio", "pydantic", "pydantic_core", "typing_extensions", "mcp",
            "starlette", "fastapi", "httpx", "httpcore", "h11", "idna", "certifi")  # fmt: skip


def calls_for(scenario: str, path: str, baseline: dict[str, Any] | None) -> int:
    """Counted calls of one implementation: the baseline's, else by `BUDGET`."""
    if baseline is not None:
        made = baseline.get("calls", {}).get(scenario, {}).get(path)
        if made:
            return int(made)
    per_call = GUESS
    if baseline is not None:
        per_call = baseline["figures"].get(scenario, {}).get(path, GUESS)
    n = BUDGET // max(int(per_call), 1)
    # A round number, so the figures read as what they are.
    n = int(float(f"{n:.1g}"))
    return max(MIN_CALLS, min(MAX_CALLS, n))


# ------------------------------------------------------------------ what is counted


def _graph(key: str) -> Any:
    from .scenarios import PATH_GRAPHS  # the harness's Paths scenarios, the same graphs

    return PATH_GRAPHS[key]()


Factory = Callable[[contextlib.AsyncExitStack], Awaitable[Any]]


def factory(scenario: str, path: str) -> Factory:
    """How to build *path* of *scenario* (an `impls.Instance`, or a string saying why not)."""
    from . import impls
    from . import paths as other_paths

    if scenario == "MCP":
        from . import mcp_tools

        variant = {"hand-written": "hand", "resolvent": "resolvent"}[path]
        return lambda stack: mcp_tools._build(stack, variant)
    if scenario == "FastAPI":
        from . import fastapi_routes

        return lambda stack: fastapi_routes.build(path, stack)
    graph = _graph(scenario)
    if path == "hand-written":
        return lambda stack: impls.handwritten(graph, stack)
    if path == "hand-written concurrent":
        # Sync resolvers are not awaited together: their floor is the plain one.
        gathered = graph if "sync" in graph.kinds else dataclasses.replace(graph, concurrent=True)
        return lambda stack: impls.handwritten(gathered, stack)
    if path == "run":
        return lambda stack: impls.resolvent(graph, stack)
    if "MCP" in path:
        from . import mcp_ask

        protocol = path.rpartition(" ")[2]
        variant = "hand-written" if path.startswith("hand-written") else "resolvent"
        return lambda stack: mcp_ask.build(graph, protocol, variant, stack)
    builder = other_paths.PATHS[path]
    return lambda stack: builder(graph, stack)


def items(only: list[str] | None, paths: list[str] | None) -> list[tuple[str, str]]:
    """(scenario, path) pairs, every one unless *only* (scenario key prefixes) and *paths*
    narrow them."""
    out = [(s, p) for s in SCENARIOS for p in PATHS]
    out += [(s, p) for s, ps in OTHERS.items() for p in ps]
    if only:
        out = [(s, p) for s, p in out if any(s.startswith(o) for o in only)]
    if paths:
        out = [(s, p) for s, p in out if p in paths]
    return out


# ------------------------------------------------------------------ the counted process


async def _child(spec: list[tuple[str, str, int]], warm: int) -> None:
    from .runner import Scenario, verify

    # No log line per FastAPI request (building an MCPServer turns them on; see
    # `benchmarks.__main__.quiet_http_clients`).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    gc.collect()
    async with contextlib.AsyncExitStack() as stack:
        built: list[Any] = []
        for scenario, path, calls in spec:
            inst = await factory(scenario, path)(stack)
            if isinstance(inst, str):
                raise SystemExit(f"{scenario} / {path}: cannot be built: {inst}")
            graph = None if scenario in OTHERS else _graph(scenario)
            if graph is not None:
                await verify(inst, Scenario(scenario, scenario, graph, {}))
            # Counts above CPython's cached small ints (256): each count then makes a new
            # int, from the first counted call on, whatever the number of calls before.
            for counter in (inst.counts, inst.teardowns):
                counter[:] = [c + 1_000 for c in counter]
            for _ in range(min(warm, max(2 * calls, 20))):
                await inst.once()
            built.append(inst)
        # Instrumentation goes on now (the parent turns it on), then each is counted.
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.readline()
        for inst, (_, _, calls) in zip(built, spec, strict=True):
            once = inst.once
            gc.collect()
            gc.disable()
            for _ in range(50):
                await once()
            os.getppid()  # marker: callgrind dumps what ran before
            for _ in range(calls):
                await once()
            os.getppid()  # marker: the dump of the counted calls
            gc.enable()


def _totals(path: Path) -> int:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def family(scenario: str, path: str) -> str:
    """Which counting process an implementation runs in. What ran before in a process
    moves a figure (an MCP client's tasks and loops change what a later call scope pays:
    S7's ``run`` read 77% more counted after the MCP tools), so each kind runs alone."""
    if scenario in OTHERS:
        return "in process"
    if "MCP" in path:
        return path.rpartition(" ")[2]  # the protocol
    return "paths"


class _Counting:
    """One process under callgrind counting some implementations (see `count`)."""

    def __init__(
        self,
        spec: list[tuple[str, str, int]],
        warm: int,
        out: Path,
        package: Path = ROOT,
        child: str = "benchmarks.instructions",
    ) -> None:
        """Count *spec* in the package of the checkout *package* (default: this one), in
        a process running the module *child* (``--child SPEC``, as `_child` does)."""
        self.spec, self.out = spec, out
        out.mkdir()
        (out / "spec.json").write_text(json.dumps({"spec": spec, "warm": warm}), encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONHASHSEED"] = "0"
        env["PYTHONPATH"] = os.pathsep.join([str(package / "src"), str(ROOT)])
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-before=getppid",
            f"--callgrind-out-file={out}/cg.%p", "-q", f"--log-file={out}/valgrind.log",
            sys.executable, "-m", child, "--child", str(out / "spec.json"),
        ]  # fmt: skip
        self.child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = ""

    def _failed(self, what: str) -> RuntimeError:
        log = (self.out / "valgrind.log").read_text(encoding="utf-8", errors="replace")
        return RuntimeError(
            f"the counted process {what} (exit {self.child.returncode}); {log[-2000:]}"
        )

    def start(self) -> None:
        """Wait until it is ready, turn instrumentation on, let it count."""
        child = self.child
        assert child.stdin is not None and child.stdout is not None
        for line in child.stdout:
            if line.startswith("ready "):
                self.pid = line.split()[1]
                break
        else:
            child.wait()
            raise self._failed("ended before it was ready")
        subprocess.run(["callgrind_control", "-i", "on", self.pid], check=True, capture_output=True)
        child.stdin.write("go\n")
        child.stdin.close()

    def dumps(self) -> list[Path]:
        """Callgrind's dumps, in order: before each count, then the count."""
        return sorted(self.out.glob(f"cg.{self.pid}.*"), key=lambda p: int(p.suffix[1:]))

    def result(self) -> dict[tuple[str, str], float]:
        assert self.child.stdout is not None
        self.child.stdout.read()
        if self.child.wait() != 0:
            raise self._failed("failed")
        parts = self.dumps()
        if len(parts) != 2 * len(self.spec):
            raise RuntimeError(
                f"callgrind wrote {len(parts)} dumps for {len(self.spec)} counts: something "
                "else called getppid() while counting"
            )
        return {
            (scenario, path): _totals(parts[2 * i + 1]) / n
            for i, (scenario, path, n) in enumerate(self.spec)
        }


def count(
    only: list[str] | None = None,
    paths: list[str] | None = None,
    *,
    calls: int | None = None,
    warm: int = WARM_CALLS,
    baseline: dict[str, Any] | None = None,
    made: dict[str, dict[str, int]] | None = None,
) -> dict[str, dict[str, float]]:
    """Instructions per warm call of each (scenario, path), counted under callgrind (one
    process per `family`, side by side); ``{scenario: {path: instructions}}``. *calls*
    sets the counted calls of every one (default: `calls_for`, by *baseline*); *made*, if
    given, receives them."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit(
            "valgrind is not installed (callgrind counts the instructions); "
            "on Debian: apt-get install -y valgrind"
        )
    chosen = items(only, paths)
    if not chosen:
        raise SystemExit("nothing to count: --only and --paths match no scenario and path")
    spec = [(s, p, calls or calls_for(s, p, baseline)) for s, p in chosen]
    if made is not None:
        for s, p, n in spec:
            made.setdefault(s, {})[p] = n
    families: dict[str, list[tuple[str, str, int]]] = {}
    for item in spec:
        families.setdefault(family(item[0], item[1]), []).append(item)
    found: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        running = [
            _Counting(part, warm, Path(tmp) / str(i)) for i, part in enumerate(families.values())
        ]
        try:
            for counting in running:
                counting.start()
            for counting in running:
                found.update(counting.result())
        finally:
            for counting in running:
                if counting.child.poll() is None:
                    counting.child.kill()
                    counting.child.wait()
    result: dict[str, dict[str, float]] = {}
    for scenario, path, _ in spec:
        result.setdefault(scenario, {})[path] = found[scenario, path]
    return result


# ------------------------------------------------------------------ baseline and report


def environment() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "versions": versions,
    }


def floor_of(path: str) -> str:
    """The hand-written path *path* is compared with (itself, for a floor)."""
    if path.startswith("hand-written"):
        return path
    return FLOORS.get(path, "hand-written")


def check(
    figures: dict[str, dict[str, float]], baseline: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(what rose more than the tolerance over *baseline*, or is missing; what rose with
    its floor). A figure whose hand-written floor rose by as much in the same count did not
    rise through resolvent's code: where the interpreter puts objects moves with unrelated
    changes, and with it a large call's figure (FastAPI's route, hand-written too, moved 3%
    between two commits that did not touch it). It is reported, not failed; so is a rise of
    a floor itself. A change to resolvent's code that costs more rises against its floor."""
    problems, notes = [], []
    for scenario, row in baseline["figures"].items():
        counted = figures.get(scenario, {})
        for path, base in row.items():
            now = counted.get(path)
            if now is None:
                problems.append(f"{scenario} / {path}: not counted (baseline {base:,.0f})")
                continue
            if now <= base * (1 + TOLERANCE):
                continue
            text = (
                f"{scenario} / {path}: {now:,.0f} instructions per call, "
                f"{now / base - 1:+.1%} over the baseline's {base:,.0f} (tolerance {TOLERANCE:.0%})"
            )
            floor = floor_of(path)
            floor_now, floor_base = counted.get(floor), row.get(floor)
            if floor == path:
                notes.append(f"{text}: hand-written code, not resolvent's")
            elif (
                floor_now and floor_base and now / floor_now <= base / floor_base * (1 + TOLERANCE)
            ):
                notes.append(f"{text}, and its floor ({floor}) rose with it")
            else:
                problems.append(text)
    return problems, notes


def table(figures: dict[str, dict[str, float]], baseline: dict[str, Any] | None = None) -> str:
    """A Markdown table: instructions per call, and each path's ratio to its floor."""
    columns = [p for p in (*PATHS, "resolvent") if any(p in row for row in figures.values())]
    lines = [
        "| scenario | " + " | ".join(columns) + " |",
        "| --- | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for scenario, row in figures.items():
        cells = []
        for path in columns:
            value = row.get(path)
            if value is None:
                cells.append("-")
                continue
            floor = row.get(FLOORS.get(path, "hand-written"))
            text = f"{value:,.0f}"
            if floor and not path.startswith("hand-written"):
                text += f" ({value / floor:.2f}x)"
            if baseline is not None:
                base = baseline["figures"].get(scenario, {}).get(path)
                if base:
                    text += f" [{value / base - 1:+.1%}]"
            cells.append(text)
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--only", help="comma-separated scenario key prefixes (S1,S2,MCP,...)")
    p.add_argument("--paths", help="comma-separated paths: " + ", ".join(PATHS) + ", resolvent")
    p.add_argument("--calls", type=int, help="counted calls of each (default: per scenario)")
    p.add_argument("--warm", type=int, default=WARM_CALLS, help="uncounted calls first")
    p.add_argument(
        "--check", action="store_true", help=f"exit 1 if a figure rose > {TOLERANCE * 100:.0f}%%"
    )
    p.add_argument("--update", metavar="WHY", help="write the baseline, with the reason")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        data = json.loads(args.child.read_text(encoding="utf-8"))
        asyncio.run(_child([tuple(s) for s in data["spec"]], data["warm"]))
        return 0
    only = args.only.split(",") if args.only else None
    paths = args.paths.split(",") if args.paths else None
    env = environment()
    baseline = None
    if args.baseline.exists():
        baseline = json.loads(args.baseline.read_text(encoding="utf-8"))
    if args.check:
        if baseline is None:
            print(f"instructions: no baseline at {args.baseline}", file=sys.stderr)
            return 1
        if baseline["python"] != env["python"]:
            print(
                f"instructions: SKIPPED: the baseline was counted on Python "
                f"{baseline['python']}, this is {env['python']}: instruction counts differ "
                "between interpreters",
                file=sys.stderr,
            )
            return 0
        differ = {
            name: f"{version} in the baseline, {env['versions'].get(name)} here"
            for name, version in baseline["versions"].items()
            if env["versions"].get(name) != version
        }
        if differ:
            print(f"instructions: note: other versions: {differ}", file=sys.stderr)
    # --update picks each count afresh from the last figures; anything else makes the
    # baseline's own counts.
    plan = baseline
    if args.update and baseline is not None:
        plan = {k: v for k, v in baseline.items() if k != "calls"}
    made: dict[str, dict[str, int]] = {}
    figures = count(only, paths, calls=args.calls, warm=args.warm, baseline=plan, made=made)
    print(table(figures, baseline if args.check else None))
    if args.json:
        record = {**env, "calls": made, "figures": figures}
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if args.update:
        if only or paths or args.calls:
            print("instructions: --update counts everything as planned: no --only, --paths "
                  "or --calls", file=sys.stderr)  # fmt: skip
            return 2
        figures_kept = {s: {p: round(v) for p, v in row.items()} for s, row in figures.items()}
        record = {"why": args.update, **env, "tolerance": TOLERANCE, "calls": made,
                  "figures": figures_kept}  # fmt: skip
        args.baseline.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"instructions: wrote {args.baseline}", file=sys.stderr)
    if args.check and baseline is not None:
        kept = {
            s: {p: v for p, v in row.items() if p in figures.get(s, {})}
            for s, row in baseline["figures"].items()
        }
        problems, notes = check(
            figures, {**baseline, "figures": kept} if only or paths else baseline
        )
        for note in notes:
            print(f"instructions: note: {note}", file=sys.stderr)
        for problem in problems:
            print(f"instructions: ROSE: {problem}", file=sys.stderr)
        if problems:
            print(
                "instructions: FAILED. If the rise is the price of something worth it, count "
                'again with `python3 .ci/jobs.py instructions --update "WHY"` and commit the '
                "baseline with a message that says why.",
                file=sys.stderr,
            )
            return 1
        print(f"instructions: every figure within {TOLERANCE:.0%} of the baseline", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
