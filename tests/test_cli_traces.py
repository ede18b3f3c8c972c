"""``resolvent graph --traces`` and ``resolvent bench --traces``: each resolver's time in
a trace file of real calls, beside the plan (and the bench's own figures)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

import graph_sample
import test_tracing
from resolvent import Container, Scope
from resolvent.__main__ import main
from trace_helpers import EXPORTER, Installed, otel, otlp_json

__all__ = ("otel",)  # the fixture, used by name

HERE = Path(__file__).parent
SECRET = "u-s3cret"


@pytest.fixture(autouse=True)
def _in_tests_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE)  # the command imports the module as a user running it would


async def _traffic(otel: Installed, calls: int) -> list:
    """*calls* calls of graph_sample.handler, traced by the SDK: its finished spans."""
    container = Container()  # its own, traced, so graph_sample's stays as every test has it
    container.provide(graph_sample.settings, scope=Scope.APP)
    container.provide(graph_sample.pool, scope=Scope.APP)
    async with container:
        for _ in range(calls):
            assert await container.run(graph_sample.handler, user_id=SECRET) == (
                f"{SECRET}@memory://"
            )
    return otel.spans()


@pytest.fixture(params=["otlp", "console"])
def trace_file(request: pytest.FixtureRequest, otel: Installed, tmp_path: Path) -> Path:
    """A trace file of 4 calls: OTLP JSON, or the SDK's console exporter writing to a file."""
    spans = anyio.run(_traffic, otel, 4)
    path = tmp_path / f"traces.{request.param}.json"
    if request.param == "otlp":  # two exports: a line each
        path.write_text(otlp_json(spans[:3]) + otlp_json(spans[3:]), encoding="utf-8")
    else:
        with path.open("w", encoding="utf-8") as file:
            ConsoleSpanExporter(out=file).export(spans)
    return path


def test_graph_shows_each_resolvers_time_in_the_traffic(
    capsys: pytest.CaptureFixture[str], trace_file: Path
) -> None:
    code = main(["graph", "graph_sample:handler", "--traces", str(trace_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan, _, traffic = out.partition("\n\nfrom the traces in ")
    assert plan.startswith("plan for graph_sample.handler(user_id): 3 step(s)")
    lines = traffic.splitlines()
    assert lines[0].startswith(f"{trace_file}: 4 call(s), ")
    rows = [line.split() for line in lines[2:]]
    # The APP values are made by the first call (a resource's teardown, at the container's
    # close, is under it too); the later calls take them from the memo.
    assert [row[:2] if row[0] == "teardown" else row[:4] for row in rows] == [
        ["graph_sample.settings", "APP", "resolve", "0.25"],
        ["memo", "hit", "0.75", "(taken"],
        ["graph_sample.pool", "APP", "setup", "0.25"],
        ["teardown", "0.25"],
        ["memo", "hit", "0.75", "(taken"],
        ["graph_sample.current_user", "CALL", "resolve", "1.00"],
    ]
    assert SECRET not in out


@pytest.mark.parametrize("trace_file", ["otlp"], indirect=True)  # a bench takes seconds
def test_bench_shows_the_traffic_beside_its_own_figures(
    capsys: pytest.CaptureFixture[str], trace_file: Path
) -> None:
    argv = ["bench", "graph_sample:handler", "--arg", f"user_id={SECRET}", "--calls", "20"]
    code = main([*argv, "--traces", str(trace_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    report, _, traffic = out.partition("\n\nfrom the traces in ")
    assert report.startswith("resolvent bench graph_sample:handler")
    header, *rows = traffic.splitlines()[1:]
    assert header.split()[-2:] == ["bench", "mean"]
    (user,) = [row for row in rows if row.startswith("  graph_sample.current_user")]
    assert user.split()[-1] in ("µs", "ms")  # the bench's mean, beside the traffic's
    (settings,) = [row for row in rows if row.startswith("  graph_sample.settings")]
    assert settings.split()[-1] == "-"  # made once, outside the bench's timing


def test_a_file_without_the_functions_calls_says_what_it_holds(
    capsys: pytest.CaptureFixture[str], trace_file: Path
) -> None:
    code = main(["graph", "graph_sample:current_user", "--traces", str(trace_file)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (
        f"resolvent graph: {trace_file} holds no call of graph_sample.current_user; it holds "
        "calls of graph_sample.handler.\n  fix: name the function whose calls the file traced\n"
    )


def test_a_file_that_is_not_a_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"notes": []}\n', encoding="utf-8")
    assert main(["graph", "graph_sample:handler", "--traces", str(path)]) == 1
    assert "is not OTLP JSON" in capsys.readouterr().err
    assert main(["graph", "graph_sample:handler", "--traces", str(tmp_path / "gone")]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("plan for graph_sample.handler(user_id)")  # drawn before the traffic
    assert err == (
        f"resolvent graph: cannot read the trace file {str(tmp_path / 'gone')!r}: "
        "No such file or directory\n"
    )


LEASES = Container(values=(anyio.Event,))  # what `--container` names: the traffic's setup
LEASES.provide(test_tracing.waited_store, scope=Scope.APP)


async def _waiting_traffic(otel: Installed) -> list:
    """Two calls of test_tracing.add_to_basket, the first of which waits for another
    call's lease on the basket: their finished spans."""
    container = test_tracing.lease_container()
    async with container:
        handle = await container.run(test_tracing.open_basket)
        EXPORTER.clear()
        assert await test_tracing.wait_for_a_lease(container, handle) == [2]
        assert await container.run(test_tracing.add_to_basket, basket=handle) == 3
    return otel.spans()


def test_graph_sums_a_lease_wait_under_the_load_that_waited(
    capsys: pytest.CaptureFixture[str], otel: Installed, tmp_path: Path
) -> None:
    path = tmp_path / "traces.json"
    path.write_text(otlp_json(anyio.run(_waiting_traffic, otel)), encoding="utf-8")
    target = ["test_tracing:add_to_basket", "--container", "test_cli_traces:LEASES"]
    code = main(["graph", *target, "--traces", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    traffic = out.partition("\n\nfrom the traces in ")[2].splitlines()
    assert traffic[0].startswith(f"{path}: 2 call(s), ")
    edit = "resolvent.State['basket'].edit"
    (at,) = [i for i, line in enumerate(traffic) if line.startswith(f"  {edit} ")]
    # The lease wait is under the load (which it lengthens), in one call of the two.
    spans = [line.split("state.", 1)[1].split()[:2] for line in traffic[at : at + 3]]
    assert spans == [
        ["load", "1.00"],
        ["lease_wait", "0.50"],
        ["commit", "1.00"],
    ]
    assert traffic[at + 1].startswith(" " * (len(edit) + 2))  # the same resolver's rows
