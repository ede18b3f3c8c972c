"""Running a user's own test file under pytest in a fresh interpreter, the way CI would."""

import subprocess
import sys
import textwrap
from pathlib import Path


def run_pytest(tmp_path: Path, filename: str, source: str) -> subprocess.CompletedProcess[str]:
    """Write *source* to *filename* in *tmp_path* and run pytest there, quietly, uncached."""
    (tmp_path / filename).write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
