"""Every benchmark figure a page publishes is the committed results file's figure.

The figures live in marked parts of README.md and docs/*.md, made by `benchmarks.published`
from benchmarks/results/latest.json. After a new full run, `python -m benchmarks.published`
rewrites them; until then this test names each page whose figures differ from the file.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path

import pytest
from benchmarks import published

ROOT = Path(__file__).resolve().parent.parent
DATA = published.load()


@pytest.mark.parametrize("page", published.PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_figures_match_the_results_file(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    expected = published.render(text, DATA)
    diff = "\n".join(difflib.unified_diff(text.splitlines(), expected.splitlines(), lineterm=""))
    assert text == expected, (
        f"{page.name} quotes figures that are not benchmarks/results/latest.json's;"
        f" run `python -m benchmarks.published`:\n{diff}"
    )


def test_every_fragment_is_published_somewhere() -> None:
    used = {
        m["name"]
        for page in published.PAGES
        for m in published.REGION.finditer(page.read_text(encoding="utf-8"))
    }
    assert used == set(published.FRAGMENTS)


def test_the_readme_summary_is_three_lines() -> None:
    assert len(published.readme_summary(DATA).splitlines()) == 3


def test_a_changed_result_is_caught() -> None:
    """A figure that moves in the results file makes the README stale."""
    data = copy.deepcopy(DATA)
    for s in data["scenarios"]:
        if s["key"] == "S1":
            s["results"]["resolvent"]["ratio"] = 9.99
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "9.99x" in published.render(readme, data)
    assert published.render(readme, data) != readme
