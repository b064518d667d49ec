"""`--jobs 1` ingest writes each file's parquet in a thread (`ingest.WriteBehind`) while it
reads the next file: a write that fails there is still that file's one-line error, an
interrupted ingest leaves none of the files it wrote, and the batches waiting for the
thread stay within their byte budget."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import DATA, scenario
from tracedb import ingest as ing

ROOT = Path(__file__).resolve().parent.parent
TIMELINE = DATA / "chrome_trace_tf_timeline" / "timeline_step0.json"


def _rows(path: Path) -> int:
    """The timeline's rows, counted from its JSON: its complete ('X') events but those of
    TF's `/stream:all` and `/memcpy` lanes, which repeat the numbered streams (README, Formats)."""
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    return sum(1 for e in events if e.get("ph") == "X" and not re.search(r"stream:all|/memcpy", names.get(e["pid"], "")))


def test_a_write_that_fails_behind_the_reader_is_that_files_error(tmp_path):
    """Under a 20 KB file-size limit the Kineto fixture's parquet cannot be written (EFBIG,
    raised in the writer thread): that file gets the warehouse error and leaves no file;
    the small timeline read after it lands whole."""
    script = f"""
import json, resource, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from tracedb import ingest as ing
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
root = Path({str(tmp_path / 'wh')!r})
paths = [Path({str(scenario('kineto_h200_fp32'))!r}), Path({str(TIMELINE)!r})]
jobs = [ing._Job(p, str(p), p.name, "r", ing._sniff(p)[0], 0, root, "i1", f"i1-{{i:05d}}") for i, p in enumerate(paths)]
behind = ing.WriteBehind()
out = [(r.error, r.rows, [w.rel for w in r.written]) for r in ing._reads(jobs, None, behind, None, None)]
behind.close()
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (big_error, _, big_files), (small_error, small_rows, small_files) = json.loads(proc.stdout.splitlines()[-1])
    assert big_error.startswith("warehouse error: cannot write ") and "File too large" in big_error
    assert "\n" not in big_error and big_files == []
    assert small_error is None
    on_disk = sorted(str(p.relative_to(tmp_path / "wh")) for p in (tmp_path / "wh").rglob("*.parquet"))
    assert on_disk == sorted(small_files)  # nothing of the big file is left
    assert sum(small_rows.values()) == _rows(TIMELINE) == 13
    assert sum(pq.read_metadata(tmp_path / "wh" / f).num_rows for f in small_files) == sum(small_rows.values())


def test_an_interrupted_ingest_leaves_no_file_of_the_run_being_read(tmp_path):
    """Ctrl-C after the first of three files (here: from the progress callback, while the
    second file's writes may still be queued) leaves no parquet file behind."""
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    for name in ("a", "b", "c"):
        shutil.copy(TIMELINE, run / f"{name}.json")
    seen = []

    def interrupt(result):
        seen.append(result)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ing.ingest([tmp_path / "runs"], tmp_path / "wh", on_file=interrupt)
    assert len(seen) == 1 and seen[0].ok and seen[0].written  # the first file had been written
    assert list((tmp_path / "wh").rglob("*.parquet")) == []


def test_the_batches_waiting_for_the_writer_stay_within_the_budget():
    """A batch that would take the waiting bytes over MAX_BYTES waits until the thread has
    room; one batch larger than the budget still goes (alone)."""
    behind = ing.WriteBehind()
    behind.MAX_BYTES = 100
    release = threading.Event()
    try:
        first = behind.submit(release.wait, 60)  # holds the thread, 60 bytes waiting
        queued = threading.Event()
        second = threading.Thread(target=lambda: (behind.submit(lambda: None, 60), queued.set()))
        second.start()
        assert not queued.wait(0.3)  # 60 + 60 > 100: the caller waits
        assert behind.waiting == 60
        release.set()
        assert queued.wait(10)
        second.join(10)
        first.result(10)
        big = behind.submit(lambda: "done", 1000)  # over the budget alone: it goes
        assert big.result(10) == "done"
        assert behind.waiting == 0
    finally:
        release.set()
        behind.close()
