"""A `--jobs N` pool's marker folder (`scratch.folder`, also the rollups' spill): named with its process's id,
and the folders of pools whose process died without cleaning up (an ingest killed with
SIGKILL) removed when the next pool starts; a live process's folder is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tracedb import scratch, workers


def test_a_new_pool_removes_the_marker_folders_of_dead_processes_only(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    left = tmp_path / f"{workers.MARKERS_PREFIX}{dead}-abc123"
    (left / "a-task").mkdir(parents=True)
    live = tmp_path / f"{workers.MARKERS_PREFIX}{os.getppid()}-def456"
    live.mkdir()
    other = tmp_path / "tracedb-ingest-notapid"  # not a pool's name of this form: left
    other.mkdir()
    mine = scratch.folder(workers.MARKERS_PREFIX)
    assert mine.parent == tmp_path and mine.name.startswith(f"{workers.MARKERS_PREFIX}{os.getpid()}-")
    assert not left.exists() and live.is_dir() and other.is_dir()
