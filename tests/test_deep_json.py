"""Issue 28 item 8: a `run.json` (or a trace) nested 100,000 deep is one named error for
its run; the rest of the batch lands (it was a RecursionError traceback that stopped the
whole batch)."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

import rawtrace
from conftest import scenario
from tracedb import Warehouse
from tracedb.cli import app

runner = CliRunner()
DEEP = 100_000


def _batch(root):
    trace = scenario("tf_stepstats_gpu_streams")
    for run in ("a_good", "b_deep_labels", "c_labels_500", "d_deep_trace", "e_good"):
        (root / run).mkdir(parents=True)
        shutil.copy(trace, root / run)
    (root / "b_deep_labels" / "run.json").write_text('{"model": ' + "[" * DEEP + "]" * DEEP + "}")
    (root / "c_labels_500" / "run.json").write_text('{"model": ' + "[" * 500 + "]" * 500 + "}")
    (root / "d_deep_trace" / "deep.json").write_text('{"traceEvents": ' + "[" * DEEP + "]" * DEEP + "}")
    (root / "e_good" / "run.json").write_text('{"model": "lstm", "nested": {"a": [1, [2]]}}')


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_deep_json_is_one_line_per_file_and_the_batch_lands(tmp_path, jobs):
    _batch(tmp_path / "runs")
    wh = tmp_path / "wh"
    r = runner.invoke(app, ["ingest", str(tmp_path / "runs"), "-w", str(wh), "-j", jobs, "-q"])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and "RecursionError" not in r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert any("b_deep_labels/run.json: invalid run labels: nested deeper than 64 levels" in e for e in errors), errors
    assert any("c_labels_500/run.json: invalid run labels: nested deeper" in e for e in errors), errors
    assert any("d_deep_trace/deep.json" in e and "nested too deeply" in e for e in errors), errors
    nodes = len(rawtrace.tf().nodes)
    got = Warehouse(wh).sql("SELECT run_id, count(*) AS n FROM nodes GROUP BY ALL ORDER BY run_id").to_pylist()
    # the runs with a bad file keep their previous version (none); the others land whole
    assert got == [{"run_id": "a_good", "n": nodes}, {"run_id": "e_good", "n": nodes}] and nodes == 577
    labels = Warehouse(wh).sql("SELECT model FROM runs WHERE run_id = 'e_good'").to_pylist()
    assert labels == [{"model": "lstm"}]
