"""What tracing off costs: S1-S7 counted with the feature present (tracing off) and
with it removed from the same commit, instruction by instruction.

    python -m benchmarks.tracing_off                  both tables, and where they differ
    python -m benchmarks.tracing_off --paths run,interpreter --out FILE

It makes two checkouts of ``HEAD`` beside this one (``git worktree add``, removed when it
ends): one with the feature removed (`remove_tracing`: ``_engine/tracing.py`` and
``_engine/spans.py`` deleted, and their hooks in ``_container/call.py``, ``deadlines.py``,
``launch.py``, ``container.py``, ``plans.py`` and ``_state/access.py`` taken out; the test
suite checks that what is left runs), and a control, the removed one plus one
module-level function nobody calls (`add_unused_function`). Each is counted the way
`benchmarks.instructions` counts (one process under callgrind, warm calls, the same
scenarios and paths), keeping callgrind's dumps, and each counted dump is split by
function: the memory allocators', the hash tables' (`CATEGORIES`) and everything else.
Run it on a committed tree: the present checkout is this one.

What it showed (see docs/benchmarks.md, "Tracing"): with tracing off, ``run`` and
``call.resolve`` run the same code as the feature removed; each of their differences is in
the allocators and the hash tables, which move with where objects land in memory, and the
control moves them as much. A multi-round ``call.run`` and a concurrent call whose plan
overlaps test each call for a traced plan, and cost a little elsewhere (176 and 126
instructions a call at dbaeb9f).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .instructions import BASELINE, PATHS, ROOT, SCENARIOS, WARM_CALLS, _Counting, calls_for


def _edit(path: Path, old: str, new: str = "") -> None:
    text = path.read_text(encoding="utf-8")
    if old not in text:
        raise SystemExit(
            f"tracing_off: {path.name} no longer has the code this script removes:\n{old}\n"
            "  fix: update `remove_tracing` in benchmarks/tracing_off.py to the code as it is"
        )
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _cut(path: Path, pattern: str, new: str = "") -> None:
    text = path.read_text(encoding="utf-8")
    cut, n = re.subn(pattern, new.replace("\\", "\\\\"), text, count=1, flags=re.S)
    if n != 1:
        raise SystemExit(
            f"tracing_off: {path.name} no longer matches {pattern!r}\n"
            "  fix: update `remove_tracing` in benchmarks/tracing_off.py to the code as it is"
        )
    path.write_text(cut, encoding="utf-8")


def remove_tracing(checkout: Path) -> None:
    """Take the tracing feature out of the package in *checkout*: what the same commit
    would be had the feature never been written."""
    src = checkout / "src" / "resolvent"
    (src / "_engine" / "tracing.py").unlink()
    (src / "_engine" / "spans.py").unlink()
    container = src / "_container"
    call, box, plans = container / "call.py", container / "container.py", container / "plans.py"
    deadlines, launch = container / "deadlines.py", container / "launch.py"
    # A person's answer, in a span of its own when traced.
    _edit(deadlines, "from sys import modules as _modules\n")
    _cut(
        deadlines,
        r"        tracing = _modules\.get\(\"resolvent\._engine\.tracing\"\).*?answer_span\(step, answer\)\n",
    )
    # A multi-round call.run of a traced plan (its span carries the round), and the
    # concurrent start of a traced plan (its call has a span), each take the slower path.
    _edit(
        call,
        "from .launch import EMPTY, PLAN_CODE, check_scopes\n",
        "from .launch import EMPTY, check_scopes\n",
    )
    _cut(
        call,
        r"            # A traced plan's multi-round call: [^\n]*\n[^\n]*plan\.code is PLAN_CODE\)\n",
    )
    _edit(
        launch,
        "and not plan.needs_call and plan.code is PLAN_CODE:\n"
        "                # No CALL resource for a call scope to hold (and a plan compiled\n"
        "                # untraced, whose call has no span): its branches need none.\n",
        "and not plan.needs_call:\n"
        "                # No CALL resource for a call scope to hold: its branches need none.\n",
    )
    # Container(tracing=...) and its property.
    _cut(box, r"        tracing: True to trace every call.*?without tracing\.\n")
    _edit(box, "        tracing: bool | None = None,\n")
    _edit(box, "        if tracing is not None:\n            self.tracing = tracing\n")
    _cut(box, r"    @property\n    def tracing\(self\).*?self\._plans\.invalidate\(\)\n\n")
    # The plan cache's setting, and a traced plan's steps and code as it compiles one.
    _edit(plans, "import sys\n")
    _edit(plans, '        "tracing",\n')
    _cut(plans, r"        self\.tracing: bool \| None = None[^\n]*\n")
    _edit(
        plans,
        "from .._graph.plan import Plan, Step, new_plan\n",
        "from .._graph.plan import Plan, new_plan\n",
    )
    _cut(plans, r"        # No local of its own for tracing.*?        elif ", "        if ")
    _edit(plans, "        if run_fn is _not_yet:\n            _trace(plan)\n")
    _cut(plans, r"def tracing_on\(.*?\n\n\nasync def _not_yet.*?\n\n\n")
    # A load waiting out another call's lease, in a span of its own when traced.
    access = src / "_state" / "access.py"
    _edit(access, "import sys\n")
    _edit(access, "from collections.abc import Awaitable\n")
    _edit(
        access,
        "await _traced(self.name, self._wait_for(store, key, token, lease, name))",
        "await self._wait_for(store, key, token, lease, name)",
    )
    _cut(access, r"\n\n\nT = TypeVar\(\"T\"\)\n\n\ndef _traced\(.*\Z", "\n")
    marks = (
        "_engine.tracing",
        "_engine.spans",
        "tracing_on",
        "_traced(",
        "_traced_steps",
        "code is PLAN_CODE",
    )
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if any(mark in text for mark in marks):
            raise SystemExit(f"tracing_off: {path} still mentions tracing after removal")


def add_unused_function(checkout: Path) -> None:
    """The control: one function nobody calls, added to a module every call uses."""
    plans = checkout / "src" / "resolvent" / "_container" / "plans.py"
    with plans.open("a", encoding="utf-8") as file:
        file.write("\n\ndef _unused(value: int) -> int:\n    return value * 2 + 1\n")


@contextlib.contextmanager
def checkout(where: Path) -> Iterator[Path]:
    """A worktree of ``HEAD`` at *where*, removed on exit."""
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(where), "HEAD"], cwd=ROOT, check=True
    )
    try:
        yield where
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, check=False)


CATEGORIES = (
    ("allocator", re.compile(r"obmalloc\.c|/malloc/|malloc\.c|memset|memcpy|memmove")),
    (
        "hash tables",
        re.compile(
            r"dictobject\.c|setobject\.c|:\w*lookup\w*|find_name_in_mro|assign_version_tag"
            r"|_PyType_Lookup|_PyDict_GetItem_KnownHash|PyErr_Occurred|memcmp"
        ),
    ),
)
"""Where a difference can live while the Python code that runs is the same: the memory
allocators (CPython's small-object one, the C library's, and the zeroing and copying of
what they hand out), whose work depends on which pool or chunk is free, and the hash
tables, whose probes depend on where their keys lie in memory (a dict or set keyed by
objects hashed by identity, the string comparisons of a probe, and the type attribute
cache, indexed by the address of the attribute's name, whose miss looks the name up along
the type's MRO and checks for an error). Anything else is "elsewhere"."""


def functions(dump: Path) -> dict[str, int]:
    """Instructions per function (its own, not its callees') in one callgrind dump."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--auto=no", str(dump)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S.*)$", line)
        if match is None or "PROGRAM TOTALS" in line:
            continue
        name = re.sub(r"/tmp/python-build[^/]*/Python-[^/]*/", "", match.group(2))
        found[name] = found.get(name, 0) + int(match.group(1).replace(",", ""))
    return found


def category(function: str) -> str:
    for name, pattern in CATEGORIES:
        if pattern.search(function):
            return name
    return "elsewhere"


Counted = dict[tuple[str, str], tuple[float, dict[str, int], int]]
"""Per (scenario, path): instructions per call, instructions per function, counted calls."""


def collect(counting: _Counting) -> Counted:
    totals = counting.result()
    dumps = counting.dumps()
    return {
        (scenario, path): (totals[scenario, path], functions(dumps[2 * i + 1]), n)
        for i, (scenario, path, n) in enumerate(counting.spec)
    }


def split(a: Counted, b: Counted, key: tuple[str, str]) -> dict[str, float]:
    """*b* less *a*, in instructions per call: in all, in the allocator, in the hash
    tables, and elsewhere (the rest of the difference)."""
    (ta, fa, n), (tb, fb, _) = a[key], b[key]
    out = {"all": tb - ta, "allocator": 0.0, "hash tables": 0.0}
    for function in set(fa) | set(fb):
        kind = category(function)
        if kind in out:
            out[kind] += (fb.get(function, 0) - fa.get(function, 0)) / n
    # By difference: a dump taken while the counted loop runs (callgrind's --dump-before)
    # lists the functions on its stack with costs that are not only their own.
    out["elsewhere"] = out["all"] - out["allocator"] - out["hash tables"]
    return out


def report(rows: dict[str, Counted], spec: list[tuple[str, str, int]]) -> str:
    removed, present, control = rows["removed"], rows["present"], rows["control"]
    lines = [
        "| scenario | path | feature removed | tracing off | difference | in the allocator "
        "| in hash tables | elsewhere | control: an unused function added | its difference "
        "| its elsewhere |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for scenario, path, _ in spec:
        key = scenario, path
        a, b, c = removed[key][0], present[key][0], control[key][0]
        d, e = split(removed, present, key), split(removed, control, key)
        lines.append(
            f"| {scenario} | {path} | {a:,.1f} | {b:,.1f} | {d['all']:+,.1f} | "
            f"{d['allocator']:+,.1f} | {d['hash tables']:+,.1f} | {d['elsewhere']:+,.1f} "
            f"| {c:,.1f} | {e['all']:+,.1f} | {e['elsewhere']:+,.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tracing_off", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--paths", default="run", help="comma-separated: " + ", ".join(PATHS))
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))  # its numbers of calls
    spec = [(s, p, calls_for(s, p, baseline)) for s in SCENARIOS for p in paths]
    rows: dict[str, Counted] = {}
    with tempfile.TemporaryDirectory(prefix="tracing-off-") as tmp:
        base = Path(tmp)
        with checkout(base / "removed-tree") as removed, checkout(base / "control-tree") as control:
            remove_tracing(removed)
            remove_tracing(control)
            add_unused_function(control)
            running: dict[str, _Counting] = {}
            for name, tree in (("present", ROOT), ("removed", removed), ("control", control)):
                running[name] = _Counting(spec, WARM_CALLS, base / name, package=tree)
                running[name].start()
            for name, counting in running.items():
                rows[name] = collect(counting)
    text = report(rows, spec)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
