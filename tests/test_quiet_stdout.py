"""DuckDB prints a progress bar into stdout for queries over ~2 s, also when stdout is not
a terminal (seen in bench/bench_queries.py at 1 M kernel rows): connections the Python API
opens have it off."""

from __future__ import annotations

import tracedb
from tracedb import catalog


def test_api_connections_have_no_progress_bar(seed_warehouse):
    for con in (catalog.connect(seed_warehouse), tracedb.Warehouse(seed_warehouse).connect()):
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchall() == [(False,)]
        con.close()
