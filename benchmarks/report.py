"""Markdown, JSON and the chain-scaling plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IMPL_ORDER = (
    "hand-written",
    "resolvent",
    "mcp-sdk",
    "fastapi-depends",
    "dishka",
    "wireup",
    "fast-depends",
    "diwire",
    "that-depends",
    "svcs",
    "modern-di",
    "fastmcp",
)


def _us(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    if value >= 100:
        return f"{value:,.0f} µs"
    return f"{value:.1f} µs" if value >= 10 else f"{value:.2f} µs"


def cell(res: dict[str, Any] | None) -> str:
    if res is None:
        return "-"
    status = res["status"]
    if status == "n/a":
        return "n/a"
    if status in ("fails", "wrong"):
        return status
    ratio = res.get("ratio")
    return _us(res["us"]) + (f" ({ratio:.2f}x)" if ratio is not None else "")


def main_table(scenarios: list[dict[str, Any]]) -> str:
    names = [n for n in IMPL_ORDER if any(n in s["results"] for s in scenarios)]
    lines = [
        "| scenario | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for s in scenarios:
        row = [cell(s["results"].get(n)) for n in names]
        lines.append(f"| {s['key']}: {s['title']} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def notes(scenarios: list[dict[str, Any]]) -> str:
    """Why a cell is n/a or failed."""
    seen: dict[tuple[str, str], list[str]] = {}
    for s in scenarios:
        for name, res in s["results"].items():
            if res["status"] != "ok" and res.get("kind") != "reference":
                seen.setdefault((name, f"{res['status']}: {res['reason']}"), []).append(s["key"])
    return "\n".join(f"- {name} ({', '.join(keys)}): {why}" for (name, why), keys in seen.items())


def chain_table(chain: dict[str, Any]) -> str:
    names = [n for n in IMPL_ORDER if n in chain["per_node_us"]]
    lines = [
        "| resolvers | " + " | ".join(names) + " |",
        "| ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for i, n in enumerate(chain["lengths"]):
        row = []
        for name in names:
            v = chain["per_node_us"][name][i]
            row.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append(f"| {n:,} | " + " | ".join(row) + " |")
    marg = chain["marginal_us"]
    row = [
        (f"{marg[n]:.3f}" if marg.get(n) is not None else "-")
        + (f" ({chain['marginal_ratio'][n]:.2f}x)" if chain["marginal_ratio"].get(n) else "")
        for n in names
    ]
    lines.append("| marginal µs/node (1,000 → 10,000) | " + " | ".join(row) + " |")
    return "\n".join(lines)


def targets_table(targets: list[dict[str, Any]]) -> str:
    lines = ["| target | limit | measured | |", "| --- | ---: | ---: | --- |"]
    for t in targets:
        mark = {True: "met", False: "**missed**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['name']} | {t['limit']} | {t['measured']} | {mark} |")
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    parts = [
        f"Run {env['date']} on {env['platform']} ({env.get('cpus')} CPUs), Python {env['python']},"
        f" resolvent at {env.get('commit', 'unknown')}"
        f" ({'quick' if data['quick'] else 'full'} run: {data['settings']['rounds']} rounds);"
        f" {versions}.",
        "",
        "Median µs per call (median of per-round ratios to hand-written in parentheses):",
        "",
        main_table(data["scenarios"]),
    ]
    why = notes(data["scenarios"])
    if why:
        parts += ["", why]
    if data.get("chain"):
        parts += ["", "Chain scaling, µs per resolver:", "", chain_table(data["chain"])]
    if data.get("app_scale"):
        from .appscale import table as app_table

        parts += ["", app_table(data["app_scale"])]
    if data.get("http"):
        from .http_e2e import markdown as http_markdown

        parts += ["", "End to end:", "", http_markdown(data["http"]).rstrip("\n")]
    if data.get("targets"):
        parts += ["", "Targets:", "", targets_table(data["targets"])]
    for line in data.get("skipped", []):
        parts += ["", f"Skipped: {line}"]
    return "\n".join(parts) + "\n"


def write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def plot(chain: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    lengths = chain["lengths"]
    for name in IMPL_ORDER:
        if name not in chain["per_call_us"]:
            continue
        pairs = [
            (n, v)
            for n, v in zip(lengths, chain["per_call_us"][name], strict=True)
            if isinstance(v, float)
        ]
        if not pairs:
            continue
        xs, ys = zip(*pairs, strict=True)
        style = {"linewidth": 2.5} if name in ("hand-written", "resolvent") else {"alpha": 0.8}
        left.plot(xs, ys, marker="o", label=name, **style)
        right.plot(xs, [y / x for x, y in pairs], marker="o", label=name, **style)
        failed = [
            n for n, v in zip(lengths, chain["per_call_us"][name], strict=True) if v == "fails"
        ]
        if failed:
            right.annotate(
                f"{name}: fails at {failed[0]:,}",
                (xs[-1], ys[-1] / xs[-1]),
                fontsize=7,
                xytext=(4, 0),
                textcoords="offset points",
            )
    left.set(
        xscale="log",
        yscale="log",
        xlabel="resolvers in the chain",
        ylabel="µs per call",
        title="Chain: time per call",
    )
    right.set(
        xscale="log",
        yscale="log",
        xlabel="resolvers in the chain",
        ylabel="µs per resolver",
        title="Chain: time per resolver",
    )
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
