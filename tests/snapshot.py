"""A tiny snapshot helper for error messages.

``assert_snapshot(name, text)`` compares *text* with ``tests/snapshots/<name>.txt``.
Run with ``RESOLVENT_UPDATE_SNAPSHOTS=1`` to (re)write the files instead, then review
the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("RESOLVENT_UPDATE_SNAPSHOTS") == "1"


def assert_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path.name}; run with RESOLVENT_UPDATE_SNAPSHOTS=1"
    expected = path.read_text(encoding="utf-8").removesuffix("\n")
    assert text == expected, f"message differs from snapshot {path.name}:\n{text}"
