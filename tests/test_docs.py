"""Every Python code block in README.md and docs/*.md runs, in order, one namespace per file.

Blocks that need the MCP adapter are preceded by
``<!-- skip: next if(not HAS_MCP, reason="needs resolvent.mcp") -->`` and are skipped
while ``resolvent.mcp`` cannot be imported.
"""

from __future__ import annotations

import importlib
import re
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


# -- each page says how its blocks run and what they need ------------------------------------

HEADER = re.compile(
    r"^\*\*Runs as shown:\*\* (?P<how>[^.]+)\. Needs (?P<needs>.+?)\n\n", re.M | re.S
)
ALONE = "each block runs alone"
IN_ORDER = "each block builds on the ones above it; the first runs alone"
# A module a page's blocks import, and what its "Needs" must name for it.
NEEDS = {
    "mcp": ("`mcp` extra",),
    "fastapi": ("`fastapi` extra",),
    "starlette": ("`starlette` extra", "`fastapi` extra"),
    "httpx": ("`starlette` extra", "`fastapi` extra"),
    "uvicorn": ("`starlette` extra", "`fastapi` extra"),
    "trio": ("`trio` extra",),
    "pytest": ("`pytest`",),
    "websockets": ("`websockets`",),
    "opentelemetry": ("`otel` extra",),
}
PAGES = [p for p in DOCUMENTS[1:] if "```python" in p.read_text(encoding="utf-8")]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_page_says_how_its_blocks_run_and_what_they_need(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    header = HEADER.search(text)
    assert header is not None and header.start() < text.index("```python"), (
        f"{path.name}: say above the first block how the blocks run and what they need, as"
        f" '**Runs as shown:** {IN_ORDER}. Needs only the package.' (or '{ALONE}'; name the"
        " extras the blocks import, like 'Needs the `mcp` extra (`pip install \".[mcp]\"`).')"
    )
    how, needs = (" ".join(header[k].split()) for k in ("how", "needs"))
    assert how in (ALONE, IN_ORDER), f"{path.name}: '{how}' is neither '{ALONE}' nor '{IN_ORDER}'"
    blocks = python_blocks(text)
    imported = {m for b in blocks for m in re.findall(r"^\s*(?:from|import) (\w+)", b, re.M)}
    for module, names in NEEDS.items():
        if module in imported:
            assert any(n in needs for n in names), f"{path.name} imports {module}: name {names[0]}"
    if "mcp" in imported and not HAS_MCP:
        pytest.skip("needs resolvent.mcp")
    # Run as the header says: the first block (or each one) in a namespace of its own.
    for i, code in enumerate(blocks if how == ALONE else blocks[:1], 1):
        exec(compile(code, f"{path.name}, block {i}", "exec"), {"__name__": "__main__"})
