"""Issue 8 acceptance on a real nightly fleet (tests/data/fleet_dev: one CNN on an H200,
profiled in 4 separate processes, plus `slow_extra2` with +0.7% GPU kernel time and 6 new
kernels, and `mem512` holding 512 MiB more GPU memory). With default settings: no day
against another day, nor day4 against day1-3, is a regression; both others are, with at
most 5 findings and the right one first. Expected figures come from the raw trace JSON
(rawtrace.kineto), not from tracedb."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rawtrace
from tracedb.cli import app
from tracedb.report import Settings, build_report
from tracedb.report import metrics as M

FLEET = Path(__file__).parent / "data" / "fleet_dev"
DAYS = ["day1", "day2", "day3", "day4"]
runner = CliRunner()


@pytest.fixture
def fleet(fleet_warehouse) -> Path:
    return fleet_warehouse


@pytest.fixture(scope="module")
def raw():
    """Per run: GPU kernel time of each numbered step, kernel names, allocator peak."""
    out = {}
    for run in [*DAYS, "slow_extra2", "mem512"]:
        doc = rawtrace.load_kineto_json(FLEET / run / "trace.json.gz")
        trace = rawtrace.kineto(doc)
        per_step = defaultdict(int)
        for k in trace.kernels:
            if k.kind == "kernel" and k.step is not None:
                per_step[k.step] += k.dur
        peak = max(e["args"]["Total Allocated"] for e in doc["traceEvents"]
                   if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
        out[run] = {"kernel_ns": [per_step[s] for s in sorted(per_step)],
                    "names": {k.name for k in trace.kernels if k.kind == "kernel"}, "peak": int(peak)}
    return out


def mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.parametrize("base,cand", list(itertools.permutations(DAYS, 2)))
def test_day_against_day_is_quiet(fleet, base, cand):
    rep = build_report(fleet, [base], [cand])
    assert rep.findings == [], [m.label for m in rep.findings]
    assert rep.headline().startswith("No regression")


def test_day4_against_days_1_to_3_is_quiet(fleet):
    rep = build_report(fleet, DAYS[:3], ["day4"])
    assert not rep.has_regression
    r = runner.invoke(app, ["report", "-w", str(fleet), "-b", "day1", "-b", "day2", "-b", "day3", "-c", "day4"])
    assert r.exit_code == 0, r.output


def test_slow_extra2_names_the_kernel_time_and_new_kernels(fleet, raw):
    rep = build_report(fleet, DAYS, ["slow_extra2"])
    found = rep.findings
    assert 1 <= len(found) <= 5 and found[0].kind == M.KERNEL_TIME
    kt = found[0]
    base = mean([mean(raw[d]["kernel_ns"]) for d in DAYS])
    cand = mean(raw["slow_extra2"]["kernel_ns"])
    assert kt.baseline == pytest.approx(base) and kt.candidate == pytest.approx(cand)
    assert kt.delta_pct == pytest.approx(100 * (cand - base) / base) and 0.6 < kt.delta_pct < 0.8
    assert kt.test.method == "across runs" and kt.test.p < 0.01 and kt.test.noise < kt.delta
    new = raw["slow_extra2"]["names"] - set().union(*(raw[d]["names"] for d in DAYS))
    assert len(new) == 6
    kset = rep.find(M.KERNEL_SET, "GPU:0")
    assert {k["name"] for k in kset.extra["new"]} == new and kset.extra["vanished"] == []
    assert "GPU:0 GPU kernel time per step +" in rep.headline() and "6 new kernels: nvjet_sm90" in rep.headline()
    # the GPU waited longer for the host in that process: shown, but host-side
    assert rep.find(M.DEVICE_STEP, "GPU:0").status == "host-bound"
    r = runner.invoke(app, ["report", "-w", str(fleet), "--label", "model=cnn4", *sum((["-b", d] for d in DAYS), []),
                            "-c", "slow_extra2"])
    assert r.exit_code == 1, r.output
    assert max(map(len, r.output.splitlines())) <= 100


def test_mem512_names_the_peak_memory(fleet, raw):
    rep = build_report(fleet, DAYS, ["mem512"])
    found = rep.findings
    assert 1 <= len(found) <= 5 and (found[0].kind, found[0].device) == (M.PEAK_REPORTED, "GPU:0")
    peak = found[0]
    assert peak.baseline == raw["day1"]["peak"] == raw["day4"]["peak"]
    assert peak.delta == raw["mem512"]["peak"] - raw["day1"]["peak"] == 512 << 20
    assert rep.headline().startswith("Regression: GPU:0 peak memory (allocator) +512 MiB (+45.11%, ±0 noise), "
                                     "GPU kernel time per step unchanged (+0.14%, ±")
    # GPU kernel time is within its noise
    assert rep.find(M.KERNEL_TIME, "GPU:0").status == "unchanged"
    # The device step time grew 25% with the GPU busy time flat: the GPU waited for the host.
    step = rep.find(M.DEVICE_STEP, "GPU:0")
    assert step.status == "host-bound" and "waited for the host" in step.reason
    # the library's front door gives the same report
    import tracedb

    assert tracedb.Warehouse(fleet).report(DAYS, ["mem512"]).headline() == rep.headline()
    gated = build_report(fleet, DAYS, ["mem512"], settings=Settings(gate_host=True))
    assert {M.DEVICE_STEP, M.PEAK_REPORTED} <= {m.kind for m in gated.findings}


def test_json_schema(fleet):
    r = runner.invoke(app, ["report", "-w", str(fleet), "--history", "4", "-f", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert (doc["schema"], doc["schema_version"], doc["verdict"], doc["exit_code"]) == ("tracedb.report", 2, "regression", 1)
    assert [x["run_id"] for x in doc["candidate_runs"]] == ["slow_extra2"]
    metrics = {m["key"]: m for m in doc["metrics"]}
    assert doc["findings"][0] == "GPU:0/gpu_kernel_time"
    kt = metrics["GPU:0/gpu_kernel_time"]
    assert set(kt) >= {"kind", "device", "unit", "gating", "status", "baseline", "candidate", "delta", "delta_pct",
                       "noise", "p_value", "confidence", "method", "practical_minimum", "impact_ns_per_step"}
    assert kt["baseline"]["runs"] == 4 and kt["baseline"]["samples"] == 20 and len(kt["candidate"]["per_run"]["slow_extra2"]) == 5
    assert set(doc["history"]["GPU:0/gpu_kernel_time"]["runs"]) == {"day2", "day3", "day4", "mem512", "slow_extra2"}


MLP = Path(__file__).parent / "data" / "fleet_mlp"
NIGHTS = ["night1", "night2", "night3", "night4"]


@pytest.fixture(scope="module")
def raw_mlp():
    out = {}
    for run in [*NIGHTS, "slow_extra_linear", "mem256"]:
        doc = rawtrace.load_kineto_json(MLP / run / "trace.json.gz")
        trace = rawtrace.kineto(doc)
        per_step = defaultdict(int)
        for k in trace.kernels:
            if k.kind == "kernel" and k.step is not None:
                per_step[k.step] += k.dur
        peak = max(e["args"]["Total Allocated"] for e in doc["traceEvents"]
                   if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
        out[run] = {"kernel_ns": [per_step[s] for s in sorted(per_step)],
                    "names": {k.name for k in trace.kernels if k.kind == "kernel"}, "peak": int(peak)}
    return out


def test_unseen_fleet_mlp(mlp_warehouse, raw_mlp):
    """The same acceptance on traces the method was not tuned on (tests/data/fleet_mlp: an
    MLP on an H200, 4 nights, plus an extra linear layer and 256 MiB more memory), with
    default settings."""
    wh = mlp_warehouse
    for base, cand in itertools.permutations(NIGHTS, 2):
        assert build_report(wh, [base], [cand]).findings == [], (base, cand)
    assert not build_report(wh, NIGHTS[:3], ["night4"]).has_regression
    slow = build_report(wh, NIGHTS, ["slow_extra_linear"])
    assert 1 <= len(slow.findings) <= 5 and slow.findings[0].kind == M.KERNEL_TIME
    base = mean([mean(raw_mlp[n]["kernel_ns"]) for n in NIGHTS])
    cand = mean(raw_mlp["slow_extra_linear"]["kernel_ns"])
    assert slow.findings[0].delta == pytest.approx(cand - base)
    new = raw_mlp["slow_extra_linear"]["names"] - set().union(*(raw_mlp[n]["names"] for n in NIGHTS))
    assert {k["name"] for k in slow.find(M.KERNEL_SET, "GPU:0").extra["new"]} == new and new
    mem = build_report(wh, NIGHTS, ["mem256"])
    assert 1 <= len(mem.findings) <= 5 and mem.findings[0].kind == M.PEAK_REPORTED
    assert mem.findings[0].delta == raw_mlp["mem256"]["peak"] - raw_mlp["night1"]["peak"] == 256 << 20
    r = runner.invoke(app, ["report", "-w", str(wh), "--label", "model=mlp4", "--history", "4", "-c", "mem256"])
    assert r.exit_code == 1, r.output


@pytest.mark.slow
def test_nightly_recipe_from_the_readme(tmp_path):
    """The README's nightly script, run night after night on the fleet: the first night has
    nothing to compare with (exit 2), the quiet nights exit 0, slow_extra2's night exits 1
    and publishes its HTML report. Slow: 10 fresh `tracedb` processes. (With only 3 nights
    before it, slow_extra2's +0.7% is not significant at 99%: t = 7.0 on 2 degrees of
    freedom, p = 0.02; with 4, p = 0.003.)"""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    script = readme.split("<!-- nightly-recipe -->")[1].split("```sh\n")[1].split("```")[0]
    (tmp_path / "nightly.sh").write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    import os
    import sys

    # `tracedb` on PATH, as `pip install` would put it, running this checkout
    (bin_dir / "tracedb").write_text(f"#!/bin/sh\nexec {sys.executable} -m tracedb.cli \"$@\"\n")
    (bin_dir / "tracedb").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": str(Path(__file__).parent.parent), "PROFILES": str(tmp_path / "profiles"),
           "TRACEDB_WAREHOUSE": str(tmp_path / "wh"), "PUBLISH": str(tmp_path / "www"), "MODEL": "cnn4",
           "HISTORY": "7"}
    import subprocess

    codes = {}
    for night in [*DAYS, "slow_extra2"]:
        shutil.copytree(FLEET / night, tmp_path / "profiles" / night)
        p = subprocess.run(["sh", str(tmp_path / "nightly.sh")], env={**env, "NIGHT": night},
                           capture_output=True, text=True, timeout=300)
        codes[night] = p.returncode
        assert p.returncode != 2 or night == "day1", p.stdout + p.stderr
    assert codes == {"day1": 2, "day2": 0, "day3": 0, "day4": 0, "slow_extra2": 1}
    html = (tmp_path / "www" / "slow_extra2.html").read_text()
    assert "GPU kernel time per step" in html and "<svg" in html
    assert (tmp_path / "www" / "day3.html").is_file()


def test_json_keys_are_documented(fleet):
    """docs/report.md describes every key the JSON report writes."""
    doc = (Path(__file__).parent.parent / "docs" / "report.md").read_text()
    schema = doc.split("## JSON, schema version 2")[1]
    data = json.loads(build_report(fleet, DAYS, ["slow_extra2"], history=None).render("json"))
    keys = set(data) | set(data["settings"]) | {k for m in data["metrics"] for k in m} \
        | set(data["metrics"][0]["baseline"]) | set(data["baseline_runs"][0])
    assert sorted(k for k in keys if f'"{k}"' not in schema) == []
    assert data["schema_version"] == 2 and f'"schema_version": {data["schema_version"]}' in schema
