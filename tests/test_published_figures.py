"""Every benchmark figure a page publishes is the committed results file's figure.

The figures live in marked parts of README.md and docs/*.md, made by `benchmarks.published`
from benchmarks/results/latest.json (and the per-interpreter table from the quick-pyXY.json
files). After a new run, `python -m benchmarks.published` rewrites them; until then this test
names each page whose figures differ from the files.
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
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


# ------------------------------------------------------------------ per interpreter

RUNS = [published.load(f) for f in published.interpreter_files()]


def declared_pythons() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = [
        m[1]
        for c in project["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))
    ]
    return sorted(found, key=lambda v: int(v.split(".")[1]))


def test_every_declared_python_has_its_results_file() -> None:
    """One quick-pyXY.json per CPython pyproject declares, run by that interpreter."""
    names = [f.name for f in published.interpreter_files()]
    wanted = [f"quick-py{v.replace('.', '')}.json" for v in declared_pythons()]
    assert names == wanted
    for name, version, data in zip(names, declared_pythons(), RUNS, strict=True):
        assert data["environment"]["python"].startswith(version + "."), name
        assert data["environment"]["implementation"] == "CPython", name
        assert data["quick"] is True, name


def test_every_per_call_scenario_is_in_every_interpreter_file() -> None:
    for data in RUNS:
        for key in published.PER_CALL:
            results = published.scenario(data, key)["results"]
            assert results["resolvent"]["status"] == "ok", (data["environment"]["python"], key)
            assert results["hand-written"]["status"] == "ok", (data["environment"]["python"], key)


def test_the_interpreter_table_is_published() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "<!-- results: pythons -->" in page
    for data in RUNS:
        assert f"Python {data['environment']['python']}: run " in page


def test_a_changed_interpreter_result_is_caught() -> None:
    """A ratio that moves in one interpreter's file makes the page stale, and is called a
    difference by interpreter when it moves beyond the runs' noise."""
    runs = copy.deepcopy(RUNS)
    res = published.scenario(runs[-1], "S4")["results"]["resolvent"]
    res["ratio"], res["ratios"] = 9.99, [9.99] * len(res["ratios"])
    text = published.per_interpreter(runs)
    assert "9.99x" in text
    assert text != published.per_interpreter(RUNS)
    python = published.interpreter_files()[-1].stem.removeprefix("quick-py")
    before = published.x(published.ratio(runs[0], "S4", "resolvent"))
    assert "resolvent's ratio differs by interpreter in " in text
    assert f"S4 ({before} on " in text
    assert any(py.replace(".", "") == python for py, _ in published.moved(runs, "S4", "resolvent"))


def test_a_move_within_the_noise_is_not_a_difference() -> None:
    """The same run under every interpreter, or one whose middle per-round ratios overlap
    the oldest's, differs nowhere."""
    same = [copy.deepcopy(RUNS[0]) for _ in RUNS]
    assert all(published.moved(same, k, "resolvent") == [] for k in published.PER_CALL)
    shifted = copy.deepcopy(same)
    res = published.scenario(shifted[-1], "S1")["results"]["resolvent"]
    base = published.scenario(shifted[0], "S1")["results"]["resolvent"]
    # 20% higher, but half its rounds are where the oldest run's were.
    res["ratio"] = base["ratio"] * 1.2
    res["ratios"] = [*base["ratios"], *(r * 1.2 for r in base["ratios"])]
    assert published.moved(shifted, "S1", "resolvent") == []
