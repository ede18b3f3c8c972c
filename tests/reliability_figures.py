"""Figures from the reliability tests, for RELIABILITY.md.

Every reliability test calls `record` with what it did (calls made, faults injected,
resources leaked, inputs tried). The figures are printed (visible with ``pytest -s``) and,
when ``RESOLVENT_FIGURES=1`` is set, merged into ``benchmarks/results/reliability.json``.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "reliability.json"


def record(name: str, figures: dict[str, Any]) -> None:
    """Print *figures* under *name*; merge them into the results file when asked to."""
    print(f"\n[reliability] {name}: {json.dumps(figures, sort_keys=True)}")
    if not os.environ.get("RESOLVENT_FIGURES"):
        return
    data: dict[str, Any] = {}
    if RESULTS.exists():
        data = json.loads(RESULTS.read_text())
    data.setdefault("tests", {})[name] = figures
    data["python"] = platform.python_version()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_size(default: int, full: int) -> int:
    """*full* when ``RESOLVENT_LOAD=full`` is set, else *default*."""
    return full if os.environ.get("RESOLVENT_LOAD") == "full" else default
