"""One Kineto file per rank in a run folder is one multi-rank run; ranks stay apart."""

from __future__ import annotations

import gzip
import json

from conftest import scenario
from tracedb import catalog
from tracedb.ingest import ingest

KERNELS_PER_RANK = 1038  # kind = 'kernel' rows in the H200 fixture


def test_two_ranks_one_run(tmp_path):
    doc = json.loads(gzip.decompress(scenario("kineto_h200_fp32").read_bytes()))
    run = tmp_path / "runs" / "ddp_job"
    run.mkdir(parents=True)
    for rank in (0, 1):
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        (run / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "runs"], wh)
    assert summary.ok, summary.errors
    con = catalog.connect(wh)
    per_rank = con.execute(
        "SELECT rank, device, count(*) FROM kernels WHERE kind = 'kernel' GROUP BY ALL ORDER BY ALL").fetchall()
    assert per_rank == [(0, "GPU:0", KERNELS_PER_RANK), (1, "GPU:0", KERNELS_PER_RANK)]
    # both ranks' GPU:0 rows sit in the same device partition, in separate files
    files = sorted(p.name for p in (wh / "kernels" / "run_id=ddp_job" / "device=GPU%3A0").iterdir())
    assert len(files) == 2 and files[0] != files[1]
    meta = {json.loads(m)["distributed_info"]["rank"]: json.loads(m)
            for (m,) in con.execute("SELECT metadata FROM files ORDER BY path").fetchall()}
    assert sorted(meta) == [0, 1]
    assert meta[1]["device_properties"][0]["name"] == "NVIDIA H200"
    assert con.execute("SELECT source_files FROM runs").fetchone()[0] == ["rank0.json.gz", "rank1.json.gz"]
