"""`tracedb report` on the real LSTM StepStats seed: a candidate run whose MatMul kernels
were made twice as slow (and BiasAdd twice as fast, Tile renamed) by editing the text
proto, against untouched baseline runs. Expected numbers are worked out from the edited
text with plain regexes, independently of tracedb's reader and SQL."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from html.parser import HTMLParser

import pytest
import typer
from typer.testing import CliRunner

from conftest import scenario
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.report import build_report, report_command

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
    assert _peak_bytes(seed["original"], "GPU_0_bfc") == 66_359_808


def test_matmul_regression_exact(seed):
    rep = build_report(seed["wh"], ["base"], ["cand"])
    mm = rep.find("kernel", "MatMul")
    assert (mm.baseline, mm.candidate, mm.delta) == (3_071_000, 6_142_000, 3_071_000)
    assert mm.delta_pct == pytest.approx(100.0)
    assert (mm.baseline_count, mm.candidate_count, mm.status) == (83, 83, "regression")
    total = rep.find("gpu", "GPU kernel time")
    assert (total.baseline, total.candidate, total.status) == (7_485_000, 10_440_000, "regression")
    bias = rep.find("kernel", "BiasAdd")
    assert (bias.delta, bias.delta_pct, bias.status) == (-116_000, -50.0, "improvement")
    # TileV2 is new but costs 2 µs, under the 10 µs threshold: listed, not a regression
    new, gone = rep.new(), rep.vanished()
    assert [(c.name, c.candidate, c.status) for c in new] == [("TileV2", 2_000, "unchanged")]
    assert [(c.name, c.baseline) for c in gone] == [("Tile", 2_000)]
    assert [c.label for c in rep.regressions] == ["kernel MatMul", "GPU kernel time"]
    assert [c.label for c in rep.improvements] == ["kernel BiasAdd"]
    assert rep.has_regression
    # untouched metrics stay put and match the trace
    assert rep.find("step", "mean step time").delta == 0 and rep.find("step", "mean step time").baseline == 13_014_000
    peak = rep.find("memory", "GPU:0 GPU_0_bfc")
    assert (peak.baseline, peak.candidate) == (66_359_808, 66_359_808)
    assert rep.find("graph", "nodes").baseline == 577
    assert rep.find("op_type", "MatMul").delta == 0  # ops untouched, only their kernels
    assert [r.run_id for r in rep.baseline_runs] == ["base"]
    assert (rep.candidate_runs[0].commit, rep.candidate_runs[0].model) == ("def456", MODEL)


def test_markdown(seed):
    md = build_report(seed["wh"], ["base"], ["cand"]).to_markdown()
    lines = md.splitlines()
    assert lines[0] == "# tracedb regression report"
    assert lines[2] == "**2 regressions, 1 improvement, 1 new kernel, 1 vanished kernel**"
    assert "| kernel `MatMul` | 3.071 ms (83×) | 6.142 ms (83×) | +3.071 ms | +100.0% | regression |" in lines
    assert "| kernel `BiasAdd` | 232.000 µs (1×) | 116.000 µs (1×) | -116.000 µs | -50.0% | improvement |" in lines
    assert "| kernel `TileV2` | 0 ns | 2.000 µs (1×) | +2.000 µs | new | (new) |" in lines
    assert "| candidate | `cand` | `lstm <b>&amp; co` | `def456` | `K80` | 2024-05-03 03:00:00+00:00 |" in lines


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
    doc = build_report(seed["wh"], ["base"], ["cand"]).to_html()
    p = _Checker()
    p.feed(doc)
    p.close()
    assert p.stack == []
    assert "script" not in p.tags and "link" not in p.tags and "http" not in doc and "style" in p.tags
    rows = {cells[0]: (cls, cells[1:]) for cls, cells in p.rows if cells}
    assert rows["kernel MatMul"] == ("regression", ["3.071 ms (83×)", "6.142 ms (83×)", "+3.071 ms", "+100.0%", "regression"])
    assert rows["kernel BiasAdd"][0] == "improvement"
    assert "2 regressions, 1 improvement, 1 new kernel, 1 vanished kernel" in p.text
    # the label's markup came through as text, not as tags
    assert MODEL in p.text and "b" not in p.tags and "lstm &lt;b&gt;&amp;amp; co" in doc


def test_identical_runs_have_no_changes(seed):
    rep = build_report(seed["wh"], ["old"], ["base"])
    assert not rep.has_regression and rep.regressions == [] and rep.improvements == []
    assert all(c.delta == 0 and c.presence == "both" for c in rep.changes)
    assert rep.summary() == "0 regressions, 0 improvements, 0 new kernels, 0 vanished kernels"


def test_thresholds(seed):
    # +100% MatMul and +39.5% total fail a 150% bar; a 3.1 ms bar stops MatMul (+3.071 ms)
    assert not build_report(seed["wh"], ["base"], ["cand"], min_delta_pct=150).has_regression
    rep = build_report(seed["wh"], ["base"], ["cand"], min_delta_ns=3_071_000)
    assert [c.label for c in rep.regressions] == []
    rep = build_report(seed["wh"], ["base"], ["cand"], min_delta_ns=2_955_000 - 1)
    assert [c.label for c in rep.regressions] == ["kernel MatMul", "GPU kernel time"]


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
    mm = hist2.find("kernel", "MatMul")
    assert (mm.baseline, mm.baseline_count, mm.candidate) == (3_071_000, 83, 6_142_000)
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


@pytest.fixture
def cli():
    app = typer.Typer()
    app.command("report")(report_command)

    @app.callback()
    def main():
        """tracedb"""

    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["report", *args])


def test_cli_exit_codes(seed, cli, tmp_path):
    wh = str(seed["wh"])
    r = cli("-w", wh, "--baseline", "base", "--candidate", "cand")
    assert r.exit_code == 1, r.output
    assert r.output.startswith("# tracedb regression report") and "| kernel `MatMul` |" in r.output
    out = tmp_path / "r.html"
    r = cli("-w", wh, "--baseline-label", "commit=abc123", "--candidate-label", "commit=def456",
            "--format", "html", "--output", str(out))
    assert r.exit_code == 1 and r.output.strip() == "2 regressions, 1 improvement, 1 new kernel, 1 vanished kernel"
    assert out.read_text().startswith("<!DOCTYPE html>")
    r = cli("-w", wh, "-b", "base", "-c", "cand", "--min-delta-pct", "150", "-f", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["has_regression"] is False and data["improvements"] == []
    assert cli("-w", wh, "-b", "old", "-c", "base").exit_code == 0
    r = cli("-w", wh, "-b", "nope", "-c", "cand")
    assert r.exit_code == 2 and "no run named 'nope'" in r.output
    assert cli("-w", wh, "-b", "base", "-c", "cand", "-f", "pdf").exit_code == 2
    assert cli("-w", str(tmp_path / "none"), "-b", "base", "-c", "cand").exit_code == 2
    assert "Example: tracedb report" in cli("--help").output


def test_other_formats_compare(tmp_path):
    """Untimed node dumps and MegEngine's planned chunks go through the same SQL."""
    wh = tmp_path / "wh"
    for name in ("megengine_graph_profile", "node_shape_dump"):
        src = tmp_path / name
        src.mkdir()
        shutil.copy(scenario(name), src)
        assert ingest([src], wh, run_id=name).ok
    rep = build_report(wh, ["megengine_graph_profile"], ["node_shape_dump"])
    nodes = rep.find("graph", "nodes")
    assert (nodes.baseline, nodes.candidate, nodes.status) == (240, 178, "unchanged")  # counts never regress
    assert rep.find("graph", "untimed nodes: (none)").candidate == 178
    assert rep.find("step", "mean step time") is None  # neither has steps
    assert not rep.has_regression  # the candidate only lost things
