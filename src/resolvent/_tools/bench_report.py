"""The report of ``resolvent bench``: its figures as text, or drawn with matplotlib.

Reads a finished report (a dict); never measures nor runs anything.
"""

from __future__ import annotations

from typing import Any

from .bench import BenchError

__all__ = ("plot", "pyplot", "render", "within_noise")


def _us(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    if value >= 100:
        return f"{value:,.0f} µs"
    return f"{value:.2f} µs"


def within_noise(mode: dict[str, Any]) -> float | None:
    """The noise (µs) resolvent's share of a call is inside, or None if it stands out.

    A share below zero is noise whatever the estimate says: the floor is the same calls
    written out by hand, which resolvent does not beat."""
    share: float = mode["resolvent_us"]
    noise: float | None = mode.get("resolvent_noise_us")
    if noise is not None and abs(share) <= noise:
        return noise
    if share < 0:
        return max(abs(share), noise or 0.0)
    return None


def _share(mode: dict[str, Any]) -> str:
    """resolvent's share of a call, for the side-by-side table."""
    noise = within_noise(mode)
    return _us(mode["resolvent_us"]) if noise is None else f"±{_us(noise)}"


def render(report: dict[str, Any]) -> str:
    """The report as text."""
    lines: list[str] = []
    plan = report["plan"]
    scopes = ", ".join(f"{k} {v}" for k, v in plan["scopes"].items() if v)
    lines.append(f"resolvent bench {report['target']}")
    lines.append(
        f"plan: {plan['steps']} step(s){f' ({scopes})' if scopes else ''}; compile "
        f"{_us(report['compile_first_us'])} first, {_us(report['compile_us'])} again; "
        f"plan memory {report['plan_bytes'] / 1024:.1f} KB"
    )
    started: list[dict[str, Any]] = report.get("started") or []
    if started:
        parts = ", ".join(f"{s['name']} ({s['scope']}) {_us(s['us'])}" for s in started)
        lines.append(f"started once, outside the timing: {parts}")
        lines.append(f"  first call, starting them: {_us(report['first_call_us'])}")
    modes = report["modes"]
    for m in modes:
        lines.append("")
        lines.append(
            f"{m['mode']}: {m['calls']:,} calls, {m['calls_per_second']:,.0f} calls/s; per call "
            f"{_us(m['per_call_us'])} (p50 {_us(m['p50_us'])}, p99 {_us(m['p99_us'])})"
        )
        parts = m["user_parts_us"]
        lines.append(f"  your code          {_us(m['user_us']):>10}  {m['user_pct']:5.1f}%")
        for key, label in (
            ("resolvers", "resolvers"),
            ("setup", "resource set-up"),
            ("teardown", "resource teardown"),
            ("body", "the function's body"),
        ):
            if parts[key] or key == "body":
                lines.append(f"    {label:<20} {_us(parts[key]):>10}")
        missed = "what the probes missed"
        if m["thread_hops"]:
            missed = f"mostly {m['thread_hops']} worker-thread hop(s) a call; " + missed
        lines.append(f"    {'unexplained':<20} {_us(m['remainder_us']):>10}  ({missed})")
        noise = within_noise(m)
        if noise is None:
            lines.append(
                f"  resolvent          {_us(m['resolvent_us']):>10}  {m['resolvent_pct']:5.1f}%"
            )
        else:
            lines.append(f"  resolvent          within measurement noise (±{_us(noise)})")
        rows = m["resolvers"]
        if rows:
            width = max(len(r["name"]) for r in rows)
            lines.append(f"  {'resolver':<{width}}  scope    runs/call       mean        p99  kind")
            for r in rows:
                extra = ""
                if "setup_us" in r and r["runs_per_call"]:
                    extra = f" (set-up {_us(r['setup_us'])}, teardown {_us(r['teardown_us'])})"
                lines.append(
                    f"  {r['name']:<{width}}  {r['scope']:<7} {r['runs_per_call']:>10.2f} "
                    f"{_us(r['mean_us']):>10} {_us(r['p99_us']):>10}  {r['kind']}{extra}"
                )
        body = m["body"]
        lines.append(f"  body: {_us(body['mean_us'])} mean, {_us(body['p99_us'])} p99")
    if len(modes) > 1:
        lines.append("")
        header = f"  {'':<20}" + "".join(f"{m['mode']:>14}" for m in modes)
        lines.append("side by side:")
        lines.append(header)
        for key, label in (
            ("calls_per_second", "calls/s"),
            ("per_call_us", "per call"),
            ("user_us", "your code"),
            ("resolvent_us", "resolvent"),
        ):
            cells = "".join(
                f"{(f'{m[key]:,.0f}' if key == 'calls_per_second' else _us(m[key])):>14}"
                if key != "resolvent_us"
                else f"{_share(m):>14}"
                for m in modes
            )
            lines.append(f"  {label:<20}{cells}")
    timing = report["timing"]
    lines.append("")
    inside = timing["inside_ns"]
    lines.append(
        "resolvent's share is a call less the same calls written by hand (no container), "
        "run in the same chunks. The cost of timing was measured in this process and taken "
        f"off: the loop driving the calls ({report['modes'][0]['harness_us'] * 1000:.0f} ns "
        "a call, measured empty) off every figure, and what a probe's interval holds besides "
        f"your code ({inside['ASYNC']:.0f} ns for an async function) off each part."
    )
    if report.get("call_timeout_ignored") is not None:
        lines.append(
            f"The container's call_timeout ({report['call_timeout_ignored']} s) was off while "
            "measuring: with it, every mode would run in a call scope."
        )
    closed: list[dict[str, Any]] = report.get("closed") or []
    if closed:
        parts = ", ".join(f"{s['name']} {_us(s['us'])}" for s in closed)
        lines.append(f"closed after the timing: {parts}")
    return "\n".join(lines)


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files; `resolvent bench --plot` asks for it before
    it measures anything, so a missing matplotlib costs no run.

    Raises:
        BenchError: matplotlib is not installed.
    """
    try:
        import importlib

        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        # Untyped here: matplotlib is an optional extra, and its stubs are partial.
        return importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise BenchError(
            "--plot needs matplotlib, which is not installed; nothing was measured.\n"
            '  fix: pip install "resolvent[plot]" (or pip install matplotlib), or leave out --plot'
        ) from None


def plot(report: dict[str, Any], path: str) -> None:
    """Draw per-resolver time per call (and the body and resolvent's share) to *path*.

    Raises:
        BenchError: matplotlib is not installed.
    """
    plt: Any = pyplot()
    modes = report["modes"]
    labels = [r["name"].rpartition(".")[2] for r in modes[0]["resolvers"]]
    labels += ["body", "resolvent"]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.5))
    height = 0.8 / len(modes)
    for k, m in enumerate(modes):
        values = [r["us_per_call"] for r in m["resolvers"]]
        share = 0.0 if within_noise(m) is not None else m["resolvent_us"]
        values += [m["body"]["mean_us"], share]
        ys = [i + k * height for i in range(len(labels))]
        ax.barh(ys, values, height=height, label=m["mode"])
    ax.set_yticks([i + height * (len(modes) - 1) / 2 for i in range(len(labels))])
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("µs per call")
    ax.set_title(f"resolvent bench {report['target']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
