"""`tracedb report` on the real LSTM StepStats seed: a candidate run whose MatMul kernels
were made twice as slow (and BiasAdd twice as fast, Tile renamed) by editing the text
proto, against untouched baseline runs. Expected numbers are worked out from the edited
text with plain regexes, independently of tracedb's reader and SQL. One run a side and
one step a run: no noise can be measured, so the practical minimum alone decides (the
fleet tests in test_report_fleet.py cover the statistics)."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from conftest import scenario
from tracedb.cli import app
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.report import Settings, build_report
from tracedb.report import metrics as M

_BLOCK = re.compile(r"^  node_stats \{\n.*?\n  \}$", re.S | re.M)
# The model label carries markup: the HTML report must escape it.
MODEL = "lstm <b>&amp; co"


def _dev_blocks(text: str):
    for block in re.split(r"^dev_stats \{\n", text, flags=re.M)[1:]:
        yield re.match(r'\s*device: "([^"]+)"', block).group(1), block


def _edit(block: re.Match) -> str:
    """MatMul kernels x2, BiasAdd kernels /2, Tile kernels renamed TileV2."""
    text = block.group(0)
    name = re.search(r'node_name: "([^"]*)"', text).group(1)
    scale = {":MatMul": 2.0, ":BiasAdd": 0.5}.get(name[name.rfind(":"):]) if ":" in name else None
    if scale:
        return re.sub(r"(op_end_rel_micros|all_end_rel_micros): (\d+)",
                      lambda m: f"{m.group(1)}: {int(int(m.group(2)) * scale)}", text)
    if name.endswith(":Tile"):
        return text.replace(':Tile"', ':TileV2"')
    return text


def _kernel_totals(text: str) -> dict[str, list[int]]:
    """kernel type -> [instances, total µs] over the numbered GPU streams (the only rows
    that are not repeats); a copy (MEMCPY label) is not a kernel."""
    out: dict[str, list[int]] = {}
    for dev, block in _dev_blocks(text):
        if not re.search(r"/stream:\d+$", dev):
            continue
        for ns in _BLOCK.findall("\n" + block):
            name = re.search(r'node_name: "([^"]*)"', ns).group(1).partition(":")[2]
            label = re.search(r'timeline_label: "([^"]*)"', ns)
            if (label and label.group(1).startswith("MEMCPY")) or "MEMCPY" in name:
                continue
            end = re.search(r"all_end_rel_micros: (\d+)", ns)
            row = out.setdefault(name, [0, 0])
            row[0] += 1
            row[1] += int(end.group(1)) if end else 0
    return out


def _wall_us(text: str) -> int:
    """Step span: first start to last end over ops and numbered-stream activity."""
    starts, ends = [], []
    for dev, block in _dev_blocks(text):
        if dev.endswith(("/stream:all", "/memcpy")):
            continue
        for ns in _BLOCK.findall("\n" + block):
            s = int(re.search(r"all_start_micros: (\d+)", ns).group(1))
            e = re.search(r"all_end_rel_micros: (\d+)", ns)
            starts.append(s)
            ends.append(s + (int(e.group(1)) if e else 0))
    return max(ends) - min(starts)


def _gpu_span_us(text: str) -> int:
    """The device step of a one-step run: first to last activity on the numbered streams."""
    spans = []
    for dev, block in _dev_blocks(text):
        if re.search(r"/stream:\d+$", dev):
            for ns in _BLOCK.findall("\n" + block):
                s = int(re.search(r"all_start_micros: (\d+)", ns).group(1))
                e = re.search(r"all_end_rel_micros: (\d+)", ns)
                spans.append((s, s + (int(e.group(1)) if e else 0)))
    return max(e for _, e in spans) - min(s for s, _ in spans)


def _host_span_us(text: str) -> int:
    """The host step of a one-step run: first to last op on the /job:... devices."""
    spans = []
    for dev, block in _dev_blocks(text):
        if dev.startswith("/job:"):
            for ns in _BLOCK.findall("\n" + block):
                s = int(re.search(r"all_start_micros: (\d+)", ns).group(1))
                e = re.search(r"all_end_rel_micros: (\d+)", ns)
                spans.append((s, s + (int(e.group(1)) if e else 0)))
    return max(e for _, e in spans) - min(s for s, _ in spans)


def _peak_bytes(text: str, allocator: str) -> int:
    """Peak of the running sum of an allocator's allocation records (same-µs events together)."""
    events = sorted(
        (int(ts), int(n))
        for mem in re.findall(r"^    memory \{\n(.*?)\n    \}$", text, re.S | re.M)
        if f'allocator_name: "{allocator}"' in mem
        for ts, n in re.findall(r"alloc_micros: (\d+)\n\s*alloc_bytes: (-?\d+)", mem)
    )
    live = peak = 0
    for _, group in itertools.groupby(events, key=lambda e: e[0]):
        live += sum(n for _, n in group)
        peak = max(peak, live)
    return peak


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """Runs folder old/base (untouched seed) and cand (edited), with run.json labels."""
    root = tmp_path_factory.mktemp("report")
    original = scenario("tf_stepstats_gpu_streams").read_text()
    edited = _BLOCK.sub(_edit, original)
    runs = root / "runs"
    for run, commit, day, text in (("old", "aaa111", 1, original), ("base", "abc123", 2, original),
                                   ("cand", "def456", 3, edited)):
        (runs / run).mkdir(parents=True)
        (runs / run / "step.pbtxt").write_text(text)
        (runs / run / "run.json").write_text(json.dumps({
            "model": MODEL, "commit": commit, "hardware": "K80", "started_at": f"2024-05-0{day}T03:00:00Z"}))
    summary = ingest([runs], root / "wh")
    assert summary.ok, summary.errors
    return {"wh": root / "wh", "original": original, "edited": edited}


def test_independent_expectations(seed):
    base, cand = _kernel_totals(seed["original"]), _kernel_totals(seed["edited"])
    assert base["MatMul"] == [83, 3071]  # the figure top_kernels reports for this seed
    assert cand["MatMul"] == [83, 6142]
    assert base["BiasAdd"] == [1, 232] and cand["BiasAdd"] == [1, 116]
    assert base["Tile"] == [1, 2] and "Tile" not in cand and cand["TileV2"] == [1, 2]
    assert sum(n for n, _ in base.values()) == 729
    assert sum(t for _, t in base.values()) == 7485 and sum(t for _, t in cand.values()) == 10440
    assert _wall_us(seed["original"]) == 13014 and _wall_us(seed["edited"]) == 13014
    assert _gpu_span_us(seed["original"]) == 12429 and _gpu_span_us(seed["edited"]) == 12429
    assert _host_span_us(seed["original"]) == 13014
    assert _peak_bytes(seed["original"], "GPU_0_bfc") == 66_359_808


def test_matmul_regression_exact(seed):
    rep = build_report(seed["wh"], ["base"], ["cand"])
    mm = rep.find(M.KERNEL, "GPU:0", "MatMul")
    assert (mm.baseline, mm.candidate, mm.delta) == (3_071_000, 6_142_000, 3_071_000)
    assert mm.delta_pct == pytest.approx(100.0)
    assert (mm.status, mm.gating, mm.test.p, mm.test.method) == ("regression", True, None, "no spread")
    total = rep.find(M.KERNEL_TIME, "GPU:0")
    assert (total.baseline, total.candidate, total.status) == (7_485_000, 10_440_000, "regression")
    bias = rep.find(M.KERNEL, "GPU:0", "BiasAdd")
    assert (bias.delta, bias.delta_pct, bias.status) == (-116_000, -50.0, "improvement")
    # Tile renamed TileV2: one kernel vanished, one new, 2 µs each: the kernel set nets to 0
    kset = rep.find(M.KERNEL_SET, "GPU:0")
    assert [k["name"] for k in kset.extra["new"]] == ["TileV2"] and kset.extra["new"][0]["ns_per_step"] == 2_000
    assert [k["name"] for k in kset.extra["vanished"]] == ["Tile"]
    assert (kset.delta, kset.status) == (0, "unchanged")
    # The total leads: it carries 2.955 of MatMul's 3.071 ms (>= 2/3)
    assert [(m.kind, m.name) for m in rep.findings] == [(M.KERNEL_TIME, ""), (M.KERNEL, "MatMul")]
    assert rep.has_regression
    # The practical minimum: 0.5% of the device step time (the GPU span of the one step)
    step = rep.find(M.DEVICE_STEP, "GPU:0")
    assert (step.baseline, step.delta) == (12_429_000, 0)
    assert mm.practical == pytest.approx(0.005 * 12_429_000)
    # untouched metrics stay put and match the trace
    peak = rep.find(M.PEAK, "GPU:0", "GPU_0_bfc")
    assert (peak.baseline, peak.candidate, peak.status) == (66_359_808, 66_359_808, "unchanged")
    assert rep.find(M.HOST_STEP, "host").baseline == _host_span_us(seed["original"]) * 1000
    assert rep.find(M.OP_TYPE, "host", "MatMul (GPU:0)") is None or rep.find(M.OP_TYPE, "host", "MatMul (GPU:0)").delta == 0
    assert [r.run_id for r in rep.baseline_runs] == ["base"]
    assert (rep.candidate_runs[0].commit, rep.candidate_runs[0].model) == ("def456", MODEL)


def test_markdown(seed):
    md = build_report(seed["wh"], ["base"], ["cand"]).render("markdown")
    lines = md.splitlines()
    assert lines[0] == "# tracedb regression report"
    assert max(map(len, lines)) <= 100
    assert " ".join(lines[2:4]) == ("**Regression: GPU:0 GPU kernel time per step +2.955 ms (+39.48%, no spread "
                                    "measured); 1 more finding.**")
    row = next(x for x in lines if x.startswith("| `MatMul` "))
    assert [c.strip() for c in row.strip("|").split("|")] == [
        "`MatMul`", "3.071 ms", "6.142 ms", "+3.071 ms", "+100.00%", "n/a", "REGRESSED"]
    row = next(x for x in lines if x.startswith("| `BiasAdd` "))
    assert row.rstrip("| ").endswith("improved")
    assert "## Findings" in lines and lines[lines.index("## Findings") + 2].startswith("1. GPU:0 GPU kernel time")


class _Checker(HTMLParser):
    """Every element closed in order; collects table rows as (class, cells)."""

    VOID = {"meta", "br", "hr", "img", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.rows, self.tags, self.text = [], [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "tr":
            self.rows.append((dict(attrs).get("class"), []))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self.stack and self.stack[-1] in ("td", "th") and self.rows:
            self.rows[-1][1].append(data)


def test_html_is_self_contained_and_well_formed(seed):
    doc = build_report(seed["wh"], ["base"], ["cand"]).render("html")
    p = _Checker()
    p.feed(doc)
    p.close()
    assert p.stack == []
    assert "script" not in p.tags and "link" not in p.tags and "http" not in doc and "style" in p.tags
    assert {"svg", "details", "summary"} <= p.tags
    rows = {cells[0]: (cls, cells[1:]) for cls, cells in p.rows if cells}
    assert rows["GPU:0 MatMul"] == ("regression", ["3.071 ms", "-", "6.142 ms", "+3.071 ms", "+100.00%",
                                                   "no spread measured", "REGRESSED"])
    assert rows["GPU:0 BiasAdd"][0] == "improvement"
    # the label's markup came through as text, not as tags
    assert MODEL in p.text and "b" not in p.tags and "lstm &lt;b&gt;&amp;amp; co" in doc


def test_identical_runs_have_no_changes(seed):
    rep = build_report(seed["wh"], ["old"], ["base"])
    assert not rep.has_regression and rep.findings == []
    assert all(m.delta == 0 for m in rep.metrics if m.test) and not rep.with_status("not comparable")
    assert rep.headline().startswith("No regression in ")


def test_practical_minimum(seed):
    # MatMul +3.071 ms and the total +2.955 ms: a 25%-of-the-step minimum stops the total only
    rep = build_report(seed["wh"], ["base"], ["cand"], settings=Settings(min_effect_pct=24))
    assert [m.name for m in rep.findings] == ["MatMul"]
    rep = build_report(seed["wh"], ["base"], ["cand"], settings=Settings(min_effect_ns=3_071_001))
    assert rep.findings == [] and not rep.has_regression
    with pytest.raises(TracedbError, match="--confidence"):
        build_report(seed["wh"], ["base"], ["cand"], settings=Settings(confidence=1.5))


def test_selectors(seed):
    by_label = build_report(seed["wh"], baseline_labels=["commit=abc123"], candidate_labels=["commit=def456"],
                            labels=[f"model={MODEL}"])
    assert [r.run_id for r in by_label.baseline_runs] == ["base"]
    assert [r.run_id for r in by_label.candidate_runs] == ["cand"]
    # newest run against the one / two before it (by started_at); means over two runs
    hist = build_report(seed["wh"], history=1)
    assert ([r.run_id for r in hist.baseline_runs], [r.run_id for r in hist.candidate_runs]) == (["base"], ["cand"])
    hist2 = build_report(seed["wh"], history=2)
    assert [r.run_id for r in hist2.baseline_runs] == ["old", "base"]
    mm = hist2.find(M.KERNEL, "GPU:0", "MatMul")
    assert (mm.baseline, mm.candidate, mm.test.method, mm.test.se, mm.test.p) == (3_071_000, 6_142_000, "across runs", 0, 0)
    assert mm.status == "regression"  # two identical baseline runs: no noise at all
    # history of an older candidate: only what came before it
    assert [r.run_id for r in build_report(seed["wh"], candidate=["base"], history=5).baseline_runs] == ["old"]
    with pytest.raises(TracedbError, match="no run named 'nope'"):
        build_report(seed["wh"], ["nope"], ["cand"])
    with pytest.raises(TracedbError, match="no run matches the baseline selectors"):
        build_report(seed["wh"], baseline_labels=["commit=zzz"], candidate=["cand"])
    with pytest.raises(TracedbError, match=r"--history needs at least 2 runs .*no run was ingested before 'old'"):
        build_report(seed["wh"], candidate=["old"], history=1)
    with pytest.raises(TracedbError, match="expected KEY=VALUE"):
        build_report(seed["wh"], baseline_labels=["commit"], candidate=["cand"])


runner = CliRunner()


def cli(*args):
    return runner.invoke(app, ["report", *args])


def test_cli_exit_codes(seed, tmp_path):
    wh = str(seed["wh"])
    r = cli("-w", wh, "--baseline", "base", "--candidate", "cand")
    assert r.exit_code == 1, r.output
    assert r.output.startswith("# tracedb regression report") and "| `MatMul` " in r.output
    out = tmp_path / "r.html"
    r = cli("-w", wh, "--baseline-label", "commit=abc123", "--candidate-label", "commit=def456",
            "--format", "html", "--output", str(out))
    assert r.exit_code == 1
    assert r.output.strip() == "Regression: GPU:0 GPU kernel time per step +2.955 ms (+39.48%, no spread measured); 1 more finding."
    assert out.read_text().startswith("<!DOCTYPE html>")
    r = cli("-w", wh, "-b", "base", "-c", "cand", "--min-effect-ns", "3100000", "-f", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert (data["schema_version"], data["verdict"], data["exit_code"], data["findings"]) == (2, "ok", 0, [])
    assert cli("-w", wh, "-b", "old", "-c", "base").exit_code == 0
    r = cli("-w", wh, "-b", "nope", "-c", "cand")
    assert r.exit_code == 2 and "no run named 'nope'" in r.output
    assert cli("-w", wh, "-b", "base", "-c", "cand", "-f", "pdf").exit_code == 2
    assert cli("-w", str(tmp_path / "none"), "-b", "base", "-c", "cand").exit_code == 2
    assert "Example: tracedb report" in cli("--help").output


def test_missing_data_is_not_comparable(tmp_path):
    """A MegEngine profile (kernels, memory chunks) against a node dump (no timing, no
    kernels, no memory): nothing is a regression or an improvement, all is not comparable."""
    wh = tmp_path / "wh"
    for name in ("megengine_graph_profile", "node_shape_dump"):
        src = tmp_path / name
        src.mkdir()
        shutil.copy(scenario(name), src)
        assert ingest([src], wh, run_id=name).ok
    rep = build_report(wh, ["megengine_graph_profile"], ["node_shape_dump"])
    assert not rep.has_regression
    assert {m.status for m in rep.metrics} == {"not comparable"}
    kt = rep.find(M.KERNEL_TIME, "GPU:0")
    assert kt.reason == ("not comparable: only the baseline has time for GPU:0 GPU kernel time per step "
                         "(none in the candidate runs)")
    assert rep.headline().startswith("Nothing to compare that gates (not comparable: only the baseline has")
    r = cli("-w", str(wh), "-b", "node_shape_dump", "-c", "megengine_graph_profile", "-f", "json")
    assert r.exit_code == 0, r.output
    assert {m["status"] for m in json.loads(r.output)["metrics"]} == {"not comparable"}


def _scale_matmul(factor: float):
    def edit(block: re.Match) -> str:
        text = block.group(0)
        if re.search(r'node_name: "[^"]*:MatMul"', text):
            return re.sub(r"(op_end_rel_micros|all_end_rel_micros): (\d+)",
                          lambda m: f"{m.group(1)}: {round(int(m.group(2)) * factor)}", text)
        return text
    return edit


@pytest.mark.slow
def test_history_names_the_night_a_metric_moved(tmp_path):
    """12 nights of the LSTM seed: MatMul kernels 1.5x slower from night 9 on, 2x slower on
    night 4 only. `--history 11` on night 12 finds the move on night 9 and calls night 4 a
    blip, in Markdown, JSON and in the HTML trend chart."""
    original = scenario("tf_stepstats_gpu_streams").read_text()
    runs = tmp_path / "runs"
    for night in range(1, 13):
        factor = 2.0 if night == 4 else 1.5 if night >= 9 else 1.0
        folder = runs / f"night{night:02d}"
        folder.mkdir(parents=True)
        (folder / "step.pbtxt").write_text(_BLOCK.sub(_scale_matmul(factor), original))
        (folder / "run.json").write_text(json.dumps({"model": "lstm", "started_at": f"2024-05-{night:02d}T03:00:00Z"}))
    assert ingest([runs], tmp_path / "wh").ok
    rep = build_report(tmp_path / "wh", labels=["model=lstm"], history=11)
    assert [r.run_id for r in rep.candidate_runs] == ["night12"] and len(rep.baseline_runs) == 11
    h = rep.history["GPU:0/gpu_kernel_time"]
    assert [c["run_id"] for c in h["change_points"]] == ["night09"]
    assert [b["run_id"] for b in h["blips"]] == ["night04"]
    # the move: GPU kernel time of a 1.5x night against a 1.0x night, from the edited texts
    before = sum(t for _, t in _kernel_totals(original).values())
    after = sum(t for _, t in _kernel_totals(_BLOCK.sub(_scale_matmul(1.5), original)).values())
    assert (before, after) == (7485, 9004)
    assert h["change_points"][0]["shift_pct"] == pytest.approx(100 * (after - before) / before)
    assert [c["run_id"] for c in rep.history["GPU:0/kernel/MatMul"]["change_points"]] == ["night09"]
    md = rep.render("markdown")
    assert "- `GPU:0/gpu_kernel_time`: moved +20.29% on `night09`; blip on `night04`" in md
    html = rep.render("html")
    assert 'class="change-point"' in html and 'class="blip"' in html and "moved: night09" in html
    # Nobody accepted the move of night 9: night 12 is still compared with nights 1-8
    # (without the blip) and still fails, +20.29% (issue 27: red until accepted).
    kt = rep.find(M.KERNEL_TIME, "GPU:0")
    assert list(kt.base.runs) == [f"night{n:02d}" for n in (1, 2, 3, 5, 6, 7, 8)]
    assert kt.extra["left_out"] == {"night04": "blip", **{f"night{n:02d}": "a change at night09 that nobody accepted"
                                                          for n in (9, 10, 11)}}
    assert rep.has_regression and rep.findings[0] is kt and kt.delta == (after - before) * 1000
    # accepted at night 9: the baseline is its regime, nights 9-11, and night 12 passes
    import tracedb

    wh = tracedb.Warehouse(tmp_path / "wh")
    acc = wh.accept("night09", note="MatMul 1.5x: the new attention, expected")
    rep = build_report(tmp_path / "wh", labels=["model=lstm"], history=11)
    kt = rep.find(M.KERNEL_TIME, "GPU:0")
    assert list(kt.base.runs) == ["night09", "night10", "night11"] and kt.delta == 0
    assert kt.extra["left_out"] == {f"night{n:02d}": "before the change accepted at night09" for n in range(1, 9)}
    assert not rep.has_regression and [a.acceptance_id for a in rep.acceptances] == [acc.acceptance_id]
    assert f"{acc.acceptance_id}: accepted at `night09` (every metric) by" in rep.render("markdown").replace("\n", " ")
    # revoked: red again
    wh.revoke(acc.acceptance_id, note="wrong model")
    assert build_report(tmp_path / "wh", labels=["model=lstm"], history=11).has_regression
    # night 9 against the 8 nights before it: the +20.29% is found, the blip left out
    rep9 = build_report(tmp_path / "wh", labels=["model=lstm"], candidate=["night09"], history=8)
    assert rep9.findings[0].kind == M.KERNEL_TIME and rep9.findings[0].extra["left_out"] == {"night04": "blip"}
    assert rep9.findings[0].delta == (after - before) * 1000
