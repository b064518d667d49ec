"""Issue 28 item 12: missing S3 credentials, an unreachable endpoint or a bad profile give
one line naming what to set (they gave 90-180-line botocore tracebacks), on moto's S3
server on loopback. Each command runs in its own process: botocore reads the environment
once per process, and fsspec caches filesystems."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import scenario
from s3server import free_port

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "tracedb-errors"




def _env(tmp, **extra):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp / "home"), "PYTHONPATH": str(ROOT),
           "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
           "TRACEDB_CACHE_DIR": str(tmp / f"cache{time.monotonic_ns()}"), "AWS_EC2_METADATA_DISABLED": "true"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def s3(moto_server, tmp_path_factory):
    """A bucket on moto's S3 server (the session's), and a warehouse with one run in it."""
    tmp = tmp_path_factory.mktemp("s3errors")
    endpoint = moto_server
    good = _env(tmp, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_ENDPOINT_URL=endpoint)
    setup = (f"from tracedb import storage, Warehouse; storage.ObjectStorage('s3://{BUCKET}').fs.call_s3("
             f"'create_bucket', Bucket='{BUCKET}'); assert Warehouse('s3://{BUCKET}/wh').ingest("
             f"{str(scenario('tf_stepstats_gpu_streams'))!r}, run_id='lstm').ok")
    subprocess.run([sys.executable, "-c", setup], env=good, check=True, timeout=300)
    return tmp, endpoint


CASES = {
    "no credentials": ({}, "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    "bad profile": ({"AWS_PROFILE": "nosuch"}, "The config profile (nosuch) could not be found: set AWS_PROFILE"),
    # one attempt (botocore's AWS_MAX_ATTEMPTS): its default retries only delay the same message by ~7 s
    "unreachable": ({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": "http://127.0.0.1:{dead}",
                     "AWS_MAX_ATTEMPTS": "1"},
                    "cannot reach the object store"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", [["query", "top_kernels"], ["ingest", "{trace}", "--run-id", "again", "-q"]])
def test_one_line_naming_what_to_set(s3, case, command):
    tmp, endpoint = s3
    extra, message = CASES[case]
    extra = {"AWS_ENDPOINT_URL": endpoint, **{k: v.format(dead=free_port()) for k, v in extra.items()}}
    args = [a.format(trace=scenario("tf_stepstats_gpu_streams")) for a in command]
    r = subprocess.run([sys.executable, "-m", "tracedb", *args, "-w", f"s3://{BUCKET}/wh"], env=_env(tmp, **extra),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"tracedb: error: warehouse error: s3://{BUCKET}/wh: ") and message in lines[0], lines
    if case == "unreachable":
        assert "AWS_ENDPOINT_URL (now http://127.0.0.1:" in lines[0]


def test_the_warehouse_still_answers_with_good_settings(s3):
    tmp, endpoint = s3
    env = _env(tmp, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_ENDPOINT_URL=endpoint)
    r = subprocess.run([sys.executable, "-m", "tracedb", "query", "-", "-f", "csv", "-w", f"s3://{BUCKET}/wh"],
                       input="SELECT count(*) AS n FROM kernels", env=env, capture_output=True, text=True, timeout=300)
    from rawtrace import tf

    assert r.returncode == 0 and r.stdout.split() == ['"n"', str(len(tf().kernels))], r.stderr
