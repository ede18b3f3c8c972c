"""The benchmark figures the README and the docs publish, made from the committed results.

A page marks each generated part with a pair of comments, invisible once rendered::

    <!-- results: readme-summary -->

    ...generated text...

    <!-- /results -->

``python -m benchmarks.published`` rewrites every such part from
``benchmarks/results/latest.json`` (after a full run has replaced it), and
``tests/test_published_figures.py`` fails when a page's part differs from what the file gives,
so a figure cannot drift from the run it quotes. Figures outside these parts are history
(what an earlier run measured), and say so.

The per-interpreter table comes from ``benchmarks/results/quick-pyXY.json``, one file per
CPython (``python3 dev.py bench --python 3.11,3.12,3.13 --quick ...`` writes them).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .report import IMPL_ORDER, cell, markdown

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

REGION = re.compile(
    r"(?P<open><!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- /results -->)",
    re.DOTALL,
)

FASTAPI_NAMES = {
    "fastapi-depends": "FastAPI `Depends`",
    "dishka": "dishka",
    "wireup": "wireup",
}


def load(path: Path = RESULTS) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def scenario(data: dict[str, Any], key: str) -> dict[str, Any]:
    for s in data["scenarios"]:
        if s["key"] == key:
            return s
    raise KeyError(f"scenario {key!r} is not in the results file")


def ratio(data: dict[str, Any], key: str, name: str) -> float:
    res = scenario(data, key)["results"][name]
    if res["status"] != "ok":
        raise KeyError(f"{name} has no figure in {key} ({res['status']})")
    value: float = res["ratio"]
    return value


def x(value: float) -> str:
    return f"{value:.2f}x"


def best_peer(data: dict[str, Any], key: str) -> tuple[str, float]:
    """The fastest implementation other than resolvent and the hand-written baseline."""
    peers = [
        (res["ratio"], name)
        for name, res in scenario(data, key)["results"].items()
        if name not in ("hand-written", "resolvent")
        and res["status"] == "ok"
        and res.get("kind") != "reference"
    ]
    value, name = min(peers)
    return name, value


def run_line(data: dict[str, Any]) -> str:
    env = data["environment"]
    return (
        f"run {env['date']}, Python {env['python']}, {env['platform']} ({env['cpus']} CPUs),"
        f" resolvent at {env['commit']}"
    )


def readme_summary(data: dict[str, Any]) -> str:
    keys = (("S1", "one resolver"), ("S2", "an 8-resolver diamond"), ("S7", "a resource per call"))
    ours = ", ".join(f"{x(ratio(data, k, 'resolvent'))} for {what}" for k, what in keys)
    peers = ", ".join(f"{x(best_peer(data, k)[1])} ({best_peer(data, k)[0]})" for k, _ in keys)
    http = data["http"]["results"]["resolvent"]
    return (
        f"- Against hand-written code (1.00x), a call costs {ours}; the fastest other container"
        f" in each: {peers}.\n"
        f"- An MCP `tools/call` in process costs {x(ratio(data, 'MCP', 'resolvent'))} the graph"
        f" written in the tool (the MCP SDK's resolvers: {x(ratio(data, 'MCP', 'mcp-sdk'))});"
        f" over HTTP, {x(http['rps_ratio'])} the requests per second.\n"
        f"- Every scenario, peer and method ({run_line(data)}):"
        " [docs/benchmarks.md](docs/benchmarks.md).\n"
    )


def fastapi_route(data: dict[str, Any]) -> str:
    s = scenario(data, "FastAPI")["results"]
    peers = ", ".join(
        f"{label} {x(s[name]['ratio'])}" for name, label in FASTAPI_NAMES.items() if name in s
    )
    reference = s["hand-written + one yield Depends"]["ratio"]
    return (
        f"In a FastAPI route (an APP singleton, a per-request resource and 5 resolvers, through"
        f" `httpx.ASGITransport`), resolvent costs {x(s['resolvent']['ratio'])} the hand-written"
        f" route ({peers}); the hand-written route behind one empty `yield` dependency costs"
        f" {x(reference)} on its own ({run_line(data)}).\n"
    )


def results(data: dict[str, Any]) -> str:
    return markdown(data)


def fastapi_busy(data: dict[str, Any]) -> str:
    """The earlier FastAPI-only run, kept in ``fastapi.json``, as one table."""
    earlier = load(RESULTS.with_name("fastapi.json"))
    s = scenario(earlier, "FastAPI")["results"]
    names = ["hand-written", "resolvent", *FASTAPI_NAMES]
    labels = ["hand-written", "resolvent", *FASTAPI_NAMES.values()]
    return (
        "| " + " | ".join(labels) + " |\n"
        "| " + " | ".join("---:" for _ in names) + " |\n"
        "| " + " | ".join(cell(s[n]) for n in names) + " |\n"
    )


def standing(data: dict[str, Any]) -> str:
    """Where resolvent stands against the peers, scenario by scenario."""
    behind = []
    for sc in data["scenarios"]:
        ours = sc["results"].get("resolvent", {})
        if ours.get("status") != "ok":
            continue
        ahead = sorted(
            (res["ratio"], name)
            for name, res in sc["results"].items()
            # The floor and resolvent in any variant (an idempotency key's) are no peers.
            if not name.startswith(("hand-written", "resolvent"))
            and res["status"] == "ok"
            and res.get("kind") != "reference"
            and round(res["ratio"], 2) < round(ours["ratio"], 2)  # ahead as published
        )
        if ahead:
            peers = ", ".join(f"{name} ({x(value)})" for value, name in ahead)
            behind.append(f"{sc['key']}, where {peers} is ahead of resolvent ({x(ours['ratio'])})")
    if not behind:
        return "resolvent is first against every peer in every scenario.\n"
    return f"resolvent is first against every peer in every scenario but {'; '.join(behind)}.\n"


def targets(data: dict[str, Any]) -> str:
    """Which targets the run met, and what `import resolvent` costs."""
    missed = [t for t in data["targets"] if t["met"] is False]
    if missed:
        which = "; ".join(f"{t['name']}, {t['measured']} against {t['limit']}" for t in missed)
        count = ("one", "two", "three")[len(missed) - 1] if len(missed) <= 3 else len(missed)
        met = f"Every target is met but {count}: {which}."
    else:
        met = "Every target is met."
    t = data["import_time"]
    return (
        f"{met} `import resolvent` takes {t['ms']:.1f} ms of wall time (minus `python -c pass`);"
        f" `python -X importtime` reports {t['importtime_ms']:.1f} ms cumulative, which adds the"
        " instrumentation's own cost for each module.\n"
    )


# ------------------------------------------------------------------ per interpreter

# The per-call scenarios published for every interpreter.
PER_CALL = ("S1", "S2", "S3 chain 100", "S4", "S5 inline", "S5 thread", "S6", "S7")
# A ratio differs by interpreter when it moves by more than this (relative to the oldest
# interpreter's) and the middle halves (quartiles) of the two runs' per-round ratios do not
# overlap: a few rounds disturbed by the machine's other work do not decide it.
DIFFERS = 0.10


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles of *values*."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def interpreter_files() -> list[Path]:
    """The per-interpreter results files, oldest interpreter first."""
    files = RESULTS.parent.glob("quick-py3*.json")
    return sorted(files, key=lambda f: int(f.stem.removeprefix("quick-py3")))


def _minor(data: dict[str, Any]) -> str:
    return ".".join(data["environment"]["python"].split(".")[:2])


def _ok(data: dict[str, Any], key: str, name: str) -> dict[str, Any] | None:
    try:
        res: dict[str, Any] = scenario(data, key)["results"][name]
    except KeyError:
        return None
    return res if res["status"] == "ok" and res.get("ratio") is not None else None


def moved(runs: list[dict[str, Any]], key: str, name: str) -> list[tuple[str, float]]:
    """The interpreters (after the oldest) on which *name*'s ratio in *key* moved beyond
    the noise of the two runs, with the relative move."""
    base = _ok(runs[0], key, name)
    if base is None:
        return []
    out = []
    for data in runs[1:]:
        res = _ok(data, key, name)
        if res is None:
            continue
        change = res["ratio"] / base["ratio"] - 1
        (lo, hi), (base_lo, base_hi) = quartiles(res["ratios"]), quartiles(base["ratios"])
        apart = lo > base_hi or hi < base_lo
        if apart and abs(change) > DIFFERS:
            out.append((_minor(data), change))
    return out


def spread(runs: list[dict[str, Any]], keys: tuple[str, ...] = PER_CALL) -> float:
    """The median over cells of half the interquartile range of a cell's per-round ratios,
    relative to its median: the runs' noise."""
    halves = [
        (quartiles(res["ratios"])[1] - quartiles(res["ratios"])[0]) / 2 / res["ratio"]
        for data in runs
        for key in keys
        for name in IMPL_ORDER
        if name != "hand-written" and (res := _ok(data, key, name)) is not None
    ]
    halves.sort()
    return halves[len(halves) // 2] if halves else 0.0


def per_interpreter(runs: list[dict[str, Any]], keys: tuple[str, ...] = PER_CALL) -> str:
    """The per-call scenarios under each interpreter: one column group per interpreter
    (µs per call and the median per-round ratio to hand-written), and which ratios differ."""
    if not runs:
        return "No per-interpreter results file yet.\n"
    pythons = [_minor(d) for d in runs]
    lines = []
    for data in runs:
        env = data["environment"]
        mode = "quick" if data["quick"] else "full"
        lines.append(
            f"- Python {env['python']}: run {env['date']}, {env['platform']} ({env['cpus']} CPUs),"
            f" resolvent at {env['commit']}, {mode} run, {data['settings']['rounds']} rounds"
            f" of {data['settings']['batch_ms']:g} ms batches."
        )
    first = runs[0]["environment"]["versions"]
    if all(d["environment"]["versions"] == first for d in runs):
        peers = ", ".join(f"{k} {v}" for k, v in first.items())
        lines.append(f"- The same versions under every interpreter: {peers}.")
    else:
        for name in first:
            seen = [d["environment"]["versions"].get(name, "missing") for d in runs]
            if len(set(seen)) > 1:
                pairs = ", ".join(f"{v} on {py}" for v, py in zip(seen, pythons, strict=True))
                lines.append(f"- {name} differs by interpreter: {pairs}.")
    head = ["scenario", "implementation"]
    for py in pythons:
        head += [f"{py} µs", f"{py} ratio"]
    head.append("differs by interpreter")
    table = [
        "| " + " | ".join(head) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in head[2:-1]) + " | --- |",
    ]
    ours: list[str] = []
    up = down = peer_rows = 0
    for key in keys:
        names = [
            n
            for n in IMPL_ORDER
            if any(
                scenario(d, key)["results"].get(n, {}).get("status") not in (None, "n/a")
                for d in runs
            )
        ]
        for i, name in enumerate(names):
            row = [f"**{key}**" if i == 0 else "", name]
            for data in runs:
                res = scenario(data, key)["results"].get(name)
                if res is None or res["status"] != "ok":
                    row += [cell(res), ""]
                else:
                    ratio_ = res.get("ratio")
                    row += [cell({**res, "ratio": None}), x(ratio_) if ratio_ else "-"]
            diff = moved(runs, key, name) if name != "hand-written" else []
            row.append(", ".join(f"{py}: {c:+.0%}" for py, c in diff))
            table.append("| " + " | ".join(row) + " |")
            if name == "resolvent" and diff:
                values = ", ".join(
                    f"{x(r['ratio'])} on {py}"
                    for data, py in zip(runs, pythons, strict=True)
                    if (r := _ok(data, key, name)) is not None
                )
                ours.append(f"{key} ({values})")
            elif name not in ("hand-written", "resolvent"):
                peer_rows += 1
                up += sum(1 for _, c in diff if c > 0)
                down += sum(1 for _, c in diff if c < 0)
    if ours:
        verdict = (
            f"resolvent's ratio differs by interpreter in {'; '.join(ours)}, and agrees within"
            " the noise in every other scenario."
        )
    else:
        verdict = "resolvent's ratios agree within the noise in every scenario."
    newer = " or ".join(pythons[1:])
    if up or down:
        verdict += (
            f" Of the peers' {peer_rows} rows, {up + down} figures on {newer} differ"
            f" ({up} higher, {down} lower; the last column names them)."
        )
    else:
        verdict += " So do the peers'."
    noise = (
        f"Half the interquartile range of a cell's per-round ratios is {spread(runs, keys):.1%}"
        " of its median (the median over the cells of these runs)."
    )
    return "\n".join([*lines, "", *table, "", f"{verdict} {noise}"]) + "\n"


def pythons(data: dict[str, Any]) -> str:
    """The per-interpreter table, from the quick-pyXY.json files (not from *data*)."""
    return per_interpreter([load(f) for f in interpreter_files()])


PATHS_RESULTS = ROOT / "benchmarks" / "results" / "paths.json"

# Each path's table: its name in the time results (scenario prefix, implementation), its
# floor there, its name and floor in the instruction baseline, and whether the peers run it.
PATH_TABLES = (
    ("`container.run`", "Paths", "run", "hand-written", "run", "hand-written", True),
    ("`call.resolve` in `session.call()`", "Paths", "call.resolve", "hand-written",
     "call.resolve", "hand-written", True),
    ("the interpreter (`container.call(rounds=True)`)", "Paths", "interpreter", "hand-written",
     "interpreter", "hand-written", True),
    ("concurrent mode (`Container(concurrent=True)`)", "Paths", "concurrent",
     "hand-written concurrent", "concurrent", "hand-written concurrent", False),
    ("an MCP tool that may ask, legacy protocol", "Ask legacy", "resolvent", "hand-written",
     "MCP ask legacy", "hand-written MCP legacy", False),
    ("an MCP tool that may ask, 2026-07-28 protocol", "Ask 2026-07-28", "resolvent",
     "hand-written", "MCP ask 2026-07-28", "hand-written MCP 2026-07-28", False),
)  # fmt: skip


def _time_cell(res: dict[str, Any] | None, floor: dict[str, Any] | None) -> str:
    if res is None or res.get("status") != "ok":
        return "-" if res is None else str(res["status"])
    text = cell({**res, "ratio": None})
    ratio = _per_round(res, floor)
    return text if ratio is None else f"{text} ({ratio:.2f}x)"


def _per_round(res: dict[str, Any] | None, floor: dict[str, Any] | None) -> float | None:
    """The median of *res*'s per-round ratios to *floor* (timed in the same rounds)."""
    if res is None or floor is None:
        return None
    if res.get("status") != "ok" or floor.get("status") != "ok":
        return None
    return statistics.median(
        a / b for a, b in zip(res["samples_us"], floor["samples_us"], strict=False)
    )


def paths(data: dict[str, Any]) -> str:
    """One table per path of resolvent on S1-S7: time (from paths.json, a run of
    ``--only Paths,Ask``) and instructions per call (the guard's committed baseline), each
    beside its hand-written floor, and the best peer of the main table's same scenario."""
    from . import instructions

    timed = load(PATHS_RESULTS)
    counted = json.loads(instructions.BASELINE.read_text(encoding="utf-8"))
    env = timed["environment"]
    out = [
        f"Time: run {env['date']}, Python {env['python']}, {env['platform']} ({env['cpus']} "
        f"CPUs), resolvent at {env['commit']}, {timed['settings']['rounds']} rounds of "
        f"{timed['settings']['batch_ms']:g} ms batches. Instructions: the guard's baseline "
        f"(Python {counted['python']}; why it was last counted: {counted['why']}).",
    ]
    by_key = {sc["key"]: sc["results"] for sc in timed["scenarios"]}
    for title, prefix, name, floor, counted_name, counted_floor, peers in PATH_TABLES:
        out += [
            "",
            f"**{title}**",
            "",
            "| scenario | hand-written | resolvent | best peer (main table) | instructions, "
            "hand-written | instructions, resolvent |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for key in instructions.SCENARIOS:
            results = by_key.get(f"{prefix} {key}", {})
            peer = "-"
            if peers:
                try:
                    peer_name, peer_ratio = best_peer(data, key)
                    peer = f"{peer_name} {x(peer_ratio)}"
                except (KeyError, ValueError):
                    pass
            figures = counted["figures"].get(key, {})
            floor_count, count = figures.get(counted_floor), figures.get(counted_name)
            instr = "-" if count is None else f"{count:,}"
            if count is not None and floor_count:
                instr += f" ({count / floor_count:.2f}x)"
            out.append(
                f"| {key} | {_time_cell(results.get(floor), None)} | "
                f"{_time_cell(results.get(name), results.get(floor))} | {peer} | "
                f"{'-' if floor_count is None else f'{floor_count:,}'} | {instr} |"
            )
    return "\n".join(out) + "\n"


STATE_RESULTS = ROOT / "benchmarks" / "results" / "state.json"
STATE_NAMES = (
    "hand-written",
    "resolvent",
    "hand-written, idempotency key",
    "resolvent, idempotency key",
)


def state(data: dict[str, Any]) -> str:
    """The State edit against the same update by hand, per store and with an idempotency
    key, from ``state.json`` (a run of ``--only "State memory,State SQLite,State
    Valkey"``)."""
    run = load(STATE_RESULTS)
    env, settings = run["environment"], run["settings"]
    out = [
        f"Run {env['date']}, Python {env['python']}, {env['platform']} ({env['cpus']} CPUs,"
        f" load average {env.get('load', '?')} at the start), resolvent at {env['commit']},"
        f" {settings['rounds']} rounds of {settings['batch_ms']:g} ms batches. Median µs per"
        " call; in parentheses the median of per-round ratios to the hand-written edit, and"
        " in the last column that of the keyed edit to the hand-written keyed edit:",
        "",
        "| store | " + " | ".join(STATE_NAMES) + " | keyed, to keyed by hand |",
        "| --- | " + " | ".join("---:" for _ in STATE_NAMES) + " | ---: |",
    ]
    for sc in run["scenarios"]:
        store, results = sc["key"].removeprefix("State "), sc["results"]
        keyed = _per_round(results.get(STATE_NAMES[3]), results.get(STATE_NAMES[2]))
        cells = [cell(results.get(n)) for n in STATE_NAMES]
        cells.append("-" if keyed is None else f"{keyed:.2f}x")
        out.append(f"| {store} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def instruction_table(data: dict[str, Any]) -> str:
    """The guard's committed baseline as a table (not from *data*)."""
    from . import instructions

    counted = json.loads(instructions.BASELINE.read_text(encoding="utf-8"))
    head = (
        f"Instructions per warm call (Python {counted['python']}, {counted['machine']}; "
        f"why the baseline was last counted: {counted['why']}). In parentheses, the ratio "
        "to the path's hand-written floor:"
    )
    return head + "\n\n" + instructions.table(counted["figures"]) + "\n"


FRAGMENTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "instructions": instruction_table,
    "paths": paths,
    "readme-summary": readme_summary,
    "fastapi-route": fastapi_route,
    "results": results,
    "fastapi-busy": fastapi_busy,
    "standing": standing,
    "targets": targets,
    "pythons": pythons,
    "state": state,
}

__all__ = ("FRAGMENTS", "PAGES", "render")


def render(text: str, data: dict[str, Any]) -> str:
    """*text* with every marked part made again from *data*."""

    def fill(m: re.Match[str]) -> str:
        make = FRAGMENTS.get(m["name"])
        if make is None:
            raise KeyError(f"unknown results fragment {m['name']!r}; known: {sorted(FRAGMENTS)}")
        # Blank lines around the part keep the markers out of its paragraphs and tables.
        return m["open"] + "\n" + make(data).strip("\n") + "\n\n" + m["close"]

    return REGION.sub(fill, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    data = load()
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = render(text, data)
        if new != text:
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new, encoding="utf-8")
    for page in stale:
        print(f"{'stale' if check else 'rewrote'}: {page}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
