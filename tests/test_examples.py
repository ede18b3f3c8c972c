"""The examples run as-is and print what their docs promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_core_demo() -> None:
    out = run_example("core_demo.py")
    # The plan, described.
    assert "plan for book_table(guests): 5 step(s)" in out
    assert "news <- step 3 (newsletter) as outcome" in out
    # Call 1: a scripted user confirms and declines the newsletter; the call commits.
    assert "user      accept Confirm(confirm=True, name='Ada')" in out
    assert "table for 2 booked for Ada; no newsletter" in out
    assert "commit ['Ada x2']" in out
    # Call 2: a declined booking reaches the caller; the transaction saw the error.
    assert "roll back (NotAccepted)" in out
    assert "NotAccepted: parameter 'answer' of book_table" in out
    # The APP resource opens once, lazily, and closes last.
    assert out.count("open the booking book") == 1
    lines = out.splitlines()
    assert lines[-2].strip() == "app       close the booking book (1 booking(s))"
    assert lines[-1] == "done"
    # Teardown order inside call 1: the result is produced before the commit.
    assert out.index("booked for Ada") < out.index("commit ['Ada x2']")


def test_plain_anyio_on_both_backends() -> None:
    out = run_example("plain_anyio.py")
    asyncio_part, _, trio_part = out.partition("== trio")
    assert asyncio_part.startswith("== asyncio")
    for part in (asyncio_part, trio_part):
        assert "#3 ada: total 7" in part
        assert "error: pear is sold out" in part
        # The failed request's resource was still torn down.
        assert "call: request 4 finished" in part
        assert "session: cart 1 closed with ['apple', 'pear']" in part
        assert "session: cart 2 closed with ['fig']" in part
        # The session closes before the next one opens; the APP scope closes last.
        assert part.index("cart 1 closed") < part.index("cart 2 opened")
        assert part.index("cart 2 closed") < part.index("stock service down")
        assert part.count("stock service up") == 1
        assert "2. cart        SESSION async generator" in part
