"""HTA's analyses as canned SQL, checked against Holistic Trace Analysis itself.

HTA (`holistictraceanalysis`, the `test` extra) runs on the same trace folder. Its
TraceAnalysis drops each rank's last ProfilerStep by default (the last step is often cut
short), so the query runs with `step_to` = the last step but one.
"""

from __future__ import annotations

import logging

import pytest

from conftest import DATA
from rawtrace import rows
from tracedb.ingest import ingest

TWO_RANKS = DATA / "hta_nccl_two_ranks"  # steps 551 and 552 of a 128-rank NCCL job


@pytest.fixture(scope="module")
def hta_two_ranks():
    logging.disable(logging.WARNING)  # HTA logs every file it parses
    try:
        from hta.trace_analysis import TraceAnalysis

        yield TraceAnalysis(trace_dir=str(TWO_RANKS))
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def two_ranks_wh(tmp_path_factory):
    wh = tmp_path_factory.mktemp("hta") / "wh"
    assert ingest([TWO_RANKS], wh, run_id="two_ranks").ok
    return wh


@pytest.mark.slow
def test_comm_comp_overlap_equals_htas(hta_two_ranks, two_ranks_wh):
    """Tolerance: none. HTA rounds the percentage to 2 decimals, as the query does; these
    traces have whole-µs timestamps, so HTA's µs arithmetic loses nothing here."""
    want = {int(r["rank"]): r["comp_comm_overlap_pctg"]
            for r in hta_two_ranks.get_comm_comp_overlap(visualize=False).to_dict("records")}
    got = rows("comm_comp_overlap", two_ranks_wh, step_to=551)
    assert {r["rank"]: r["overlap_pct"] for r in got} == want == {0: 11.81, 1: 20.05}
    # without the step window: both steps (HTA has no way to ask for that)
    assert [r["overlap_pct"] for r in rows("comm_comp_overlap", two_ranks_wh)] == [14.95, 19.93]
