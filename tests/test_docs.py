"""Every Python code block in README.md and docs/*.md runs, in order, one namespace per file.

Blocks that need the MCP adapter are preceded by
``<!-- skip: next if(not HAS_MCP, reason="needs resolvent.mcp") -->`` and are skipped
while ``resolvent.mcp`` cannot be imported.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from unittest import SkipTest

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

from optional import skip_if_optional

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _has_mcp() -> bool:
    try:
        importlib.import_module("resolvent.mcp")
    except ImportError:
        return False
    return True


HAS_MCP = _has_mcp()
SKIP = SkipParser()
SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SKIP], path=str(ROOT))


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    document = SYBIL.parse(path)
    # Each file reads as one script: run its blocks as ``__main__``, as a reader would.
    document.namespace.update(__name__="__main__", HAS_MCP=HAS_MCP)
    ran = skipped = 0
    for example in document:
        if example.region.evaluator is SKIP.skipper:  # a skip directive, not a code block
            example.evaluate()
            continue
        try:
            example.evaluate()
        except SkipTest:
            skipped += 1
        except ModuleNotFoundError as error:
            skip_if_optional(error, str(path.relative_to(ROOT)))
            raise
        else:
            ran += 1
    # A page that runs as shown logs what failed in one line each, never a traceback.
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not tracebacks, f"{path.name} logs tracebacks: {tracebacks}"
    if skipped and not ran:
        pytest.skip(f"all {skipped} example(s) need resolvent.mcp")
