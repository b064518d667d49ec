"""`tracedb check` on a file whose SHA-256 was never recorded (the checksums table lost its
rows, or a file from before it kept them): each page's CRC is verified instead, a column
of a row group at a time; a file whose hash matches is not decoded again (its pages are
the pages written). The damage is 16 flipped bytes at offset 200, inside the first
column chunk, size unchanged: a reader decoding that chunk fails on its CRC or its header."""

from __future__ import annotations

from conftest import scenario
from tracedb.api import Warehouse
from tracedb.ingest import ingest
from tracedb.lake import Lake


def _rot(path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(200, 216):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_check_verifies_page_checksums_of_files_without_a_recorded_hash(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="r").ok
    lake = Lake(wh)
    lake.table("checksums").delete()  # no file has a recorded SHA-256 now
    assert Warehouse(wh).check() == []
    kernels = lake.add_actions("kernels").column("path").to_pylist()[0]
    _rot(wh / kernels)
    problems = Warehouse(wh).check()
    assert [(run, path) for run, path, _ in problems] == [("r", kernels)]
    assert problems[0][2].startswith("unreadable parquet"), problems


def test_check_names_a_hash_mismatch_without_decoding(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="r").ok
    kernels = Lake(wh).add_actions("kernels").column("path").to_pylist()[0]
    _rot(wh / kernels)
    assert Warehouse(wh).check() == [("r", kernels, "content differs from the SHA-256 recorded when it was written")]
