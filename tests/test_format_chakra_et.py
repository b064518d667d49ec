"""PyTorch execution traces (Chakra ET JSON) and their join to the Kineto trace beside them.

Oracles read the raw files with `json` (both ET layouts parsed here, sharing no code
with tracedb): every node, every tensor value with its writer and readers, the
record-function id pairs, and the fallback join of an older pair.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from tracedb import Warehouse, catalog, formats
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.migrate import migrate_warehouse

DATA = Path(__file__).parent / "data"
MLP = DATA / "chakra_mlp_h100"
LINEAR = DATA / "chakra_linear_param"
ET_FILES = {"mlp": MLP / "mlp_h100_et.json.gz", "linear": LINEAR / "linear_et.json.gz"}
KINETO_FILES = {"mlp": MLP / "mlp_h100_kineto.json.gz", "linear": LINEAR / "linear_kineto.json.gz"}
MARKER = "[pytorch|profiler|execution_"


# ---- raw oracles ----------------------------------------------------------------------

def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def raw_nodes(doc: dict) -> list[dict]:
    """Each node as {id, name, parent, attrs, inputs, outputs}, arguments as
    [(value, shape, type, strides)], from either layout."""
    out = []
    for n in doc["nodes"]:
        if isinstance(n.get("inputs"), dict):  # 1.0.2+: objects and an attrs list
            attrs = {a["name"]: a["value"] for a in n.get("attrs", [])}
            args = {io: list(zip(n[io]["values"], n[io]["shapes"], n[io]["types"],
                                 n[io].get("strides", [None] * len(n[io]["values"]))))
                    for io in ("inputs", "outputs")}
            parent = n["ctrl_deps"]
        else:  # 1.0.1: flat keys
            attrs = n
            args = {io: list(zip(n[io], n[io[:-1] + "_shapes"], n[io[:-1] + "_types"], [None] * len(n[io])))
                    for io in ("inputs", "outputs")}
            parent = n["parent"]
        out.append({"id": n["id"], "name": n["name"], "parent": parent, "attrs": attrs, **args})
    return sorted(out, key=lambda n: n["id"])


def tensors_of(args: list) -> list[tuple]:
    """(slot, list index, tuple, shape, strides, dtype text) of the tensors among arguments."""
    out = []
    for slot, (value, shape, typ, strides) in enumerate(args):
        if typ.startswith("Tensor(") and isinstance(value, list):
            out.append((slot, None, tuple(value), shape, strides, typ[7:-1]))
        elif typ.startswith("GenericList[") and isinstance(value, list):
            inner = typ[len("GenericList["):-1].split(",")
            for j, v in enumerate(value):
                if j < len(inner) and inner[j].startswith("Tensor(") and isinstance(v, list):
                    out.append((slot, j, tuple(v), shape[j], strides[j] if strides else None, inner[j][7:-1]))
    return out


DTYPE = {"float": "float32", "long int": "int64", "unsigned char": "uint8", "bool": "bool", "int": "int32",
         "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16"}


def mutable_args(op_schema: str | None) -> set[int]:
    """Positions of the `Tensor(a!)`-typed arguments of an op schema (`*` is no argument)."""
    if not op_schema or ") ->" not in op_schema:
        return set()
    inside = op_schema[op_schema.index("(") + 1:op_schema.index(") ->")]
    args = [a for a in re.split(r",\s*(?![^\[]*\])", inside) if a.strip() != "*"]
    return {i for i, a in enumerate(args) if "!)" in a.split(" ")[0]}


def raw_values(doc: dict) -> list[tuple]:
    """The tensor values by the documented rule: in id order each node reads its inputs
    (joining the current value's readers, or starting a value with no writer), then each
    tensor it writes starts a new value."""
    current, values = {}, []
    for n in raw_nodes(doc):
        for _, _, key, shape, strides, dtype in tensors_of(n["inputs"]):
            if key not in current:
                current[key] = {"key": key, "writer": None, "name": None, "slot": None, "shape": shape,
                                "strides": strides, "dtype": dtype, "readers": []}
                values.append(current[key])
            if n["id"] not in current[key]["readers"]:
                current[key]["readers"].append(n["id"])
        seen = set()
        for slot, _, key, shape, strides, dtype in tensors_of(n["outputs"]):
            if key in seen:
                continue
            seen.add(key)
            current[key] = {"key": key, "writer": n["id"], "name": n["name"], "slot": slot, "shape": shape,
                            "strides": strides, "dtype": dtype, "readers": []}
            values.append(current[key])
        mutable = mutable_args(n["attrs"].get("op_schema"))  # written though not returned (_foreach_add_)
        for slot, _, key, shape, strides, dtype in tensors_of(n["inputs"]):
            if slot in mutable and key not in seen:
                seen.add(key)
                current[key] = {"key": key, "writer": n["id"], "name": n["name"], "slot": None, "shape": shape,
                                "strides": strides, "dtype": dtype, "readers": []}
                values.append(current[key])
    return sorted(((v["key"][0], v["key"][1], v["key"][2], v["key"][3], v["key"][4], v["key"][5],
                   DTYPE.get(v["dtype"], v["dtype"]), v["shape"], v["strides"], v["writer"], v["name"], v["slot"],
                   v["readers"]) for v in values), key=repr)


def raw_rf_pairs(et: dict, kineto: dict) -> set[tuple[int, int]]:
    """(ET node id, Kineto event index) of every cpu_op whose Record function id is an ET node's rf_id."""
    by_rf = {n["attrs"]["rf_id"]: n["id"] for n in raw_nodes(et) if not n["name"].startswith(MARKER)}
    return {(by_rf[e["args"]["Record function id"]], i) for i, e in enumerate(kineto["traceEvents"])
            if e.get("cat") == "cpu_op" and e.get("args", {}).get("Record function id") in by_rf}


# ---- helpers --------------------------------------------------------------------------

def run_folder(tmp_path: Path, name: str, *files: Path) -> Path:
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    for f in files:
        shutil.copy(f, folder / f.name)
    return folder


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> Warehouse:
    """Both fixture pairs as run folders (`mlp`, `linear`), and the MLP's ET alone (`alone`)."""
    tmp = tmp_path_factory.mktemp("chakra")
    run_folder(tmp, "mlp", ET_FILES["mlp"], KINETO_FILES["mlp"])
    run_folder(tmp, "linear", ET_FILES["linear"], KINETO_FILES["linear"])
    alone = run_folder(tmp, "alone")
    shutil.copy(ET_FILES["mlp"], alone / "et.json.gz")
    summary = ingest([tmp / "runs"], tmp / "wh")
    assert summary.ok, summary.errors
    return Warehouse(tmp / "wh")


def sql(wh: Warehouse | Path, text: str, *params) -> list[tuple]:
    con = catalog.connect(wh.path if isinstance(wh, Warehouse) else wh)
    return con.execute(text, list(params)).fetchall()


# ---- tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ET_FILES))
def test_detected_by_content_plain_and_gzipped(tmp_path, name):
    data = gzip.decompress(ET_FILES[name].read_bytes())
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "b.dat").write_bytes(gzip.compress(data))
    assert formats.detect(tmp_path / "a.bin").NAME == formats.detect(tmp_path / "b.dat").NAME == "chakra_et"
    assert [m.NAME for m in formats.candidates(tmp_path / "a.bin")] == ["chakra_et"]  # no other reader claims it
    assert "chakra_et" not in [m.NAME for m in formats.candidates(KINETO_FILES[name])]
    assert formats.detect(KINETO_FILES[name]).NAME == "kineto"


def test_run_folders_land_with_both_files_ok(both):
    files = sql(both, "SELECT run_id, path, format, status FROM files ORDER BY run_id, path")
    assert files == [("alone", "et.json.gz", "chakra_et", "ok"),
                     ("linear", "linear_et.json.gz", "chakra_et", "ok"),
                     ("linear", "linear_kineto.json.gz", "kineto", "ok"),
                     ("mlp", "mlp_h100_et.json.gz", "chakra_et", "ok"),
                     ("mlp", "mlp_h100_kineto.json.gz", "kineto", "ok")]
    assert sql(both, "SELECT run_id, status, formats FROM runs ORDER BY run_id") == [
        ("alone", "complete", ["chakra_et"]), ("linear", "complete", ["chakra_et", "kineto"]),
        ("mlp", "complete", ["chakra_et", "kineto"])]


@pytest.mark.parametrize("run", ["mlp", "linear"])
def test_every_node_lands_untimed_with_its_attributes(both, run):
    want = sorted((n["id"], n["name"], n["parent"] if n["parent"] != n["id"] else None,
                   None if n["name"].startswith(MARKER) else n["attrs"]["rf_id"], n["attrs"]["tid"],
                   n["attrs"]["op_schema"] or None, len(n["inputs"]), len(n["outputs"]))
                  for n in raw_nodes(load(ET_FILES[run])))
    got = sql(both, "SELECT seq, node_name, parent_seq, rf_id, thread_id, op_schema, len(inputs), len(outputs) "
                    "FROM nodes WHERE run_id = ? AND source_format = 'chakra_et' ORDER BY seq", run)
    assert got == want and len(got) == {"mlp": 291, "linear": 931}[run]
    pid = load(ET_FILES[run])["pid"]
    assert sql(both, "SELECT count(*), count(start_ns), count(duration_ns), min(process_id), max(process_id) "
                     "FROM nodes WHERE run_id = ? AND source_format = 'chakra_et'", run) == [(len(want), 0, 0, pid, pid)]


@pytest.mark.parametrize("run", ["mlp", "linear"])
def test_every_tensor_value_with_writer_and_readers_equals_raw_json(both, run):
    want = raw_values(load(ET_FILES[run]))
    got = sorted((tuple(r) for r in sql(
        both, "SELECT tensor_id, storage_id, storage_offset, numel, element_bytes, device_raw, dtype, shape, "
              "strides, node_seq, node_name, slot, consumer_seqs FROM tensors WHERE run_id = ?", run)), key=repr)
    assert got == want
    assert len(got) == {"mlp": 231, "linear": 819}[run]  # 16 and 42 written by aten::_foreach_add_ (the optimizer update)
    # the writers and readers are the run's ET nodes, with the names the raw JSON gives them
    names = {n["id"]: n["name"] for n in raw_nodes(load(ET_FILES[run]))}
    flow = sql(both, "SELECT t.node_seq, w.node_name, c.seq, c.node_name FROM tensors t, unnest(t.consumer_seqs) u(s) "
                     "JOIN nodes c ON c.run_id = t.run_id AND c.source_file = t.source_file AND c.seq = u.s "
                     "LEFT JOIN nodes w ON w.run_id = t.run_id AND w.source_file = t.source_file AND w.seq = t.node_seq "
                     "WHERE t.run_id = ?", run)
    assert len(flow) == sum(len(v[-1]) for v in want) > 0
    assert all(names[r] == rn and (w is None or names[w] == wn) for w, wn, r, rn in flow)


def test_rf_id_join_equals_the_raw_record_function_pairs(both):
    want = raw_rf_pairs(load(ET_FILES["mlp"]), load(KINETO_FILES["mlp"]))
    got = sql(both, "SELECT e.seq, k.seq FROM nodes e JOIN nodes k USING (run_id, process_id, rf_id) "
                    "WHERE run_id = 'mlp' AND e.source_format = 'chakra_et' AND k.source_format = 'kineto'")
    assert set(got) == want and len(got) == len(want) == 282
    meta = dict(sql(both, "SELECT path, metadata FROM files WHERE run_id = 'mlp'"))
    assert json.loads(meta["mlp_h100_et.json.gz"])["et_link"] == {
        "method": "record_function_id", "kineto_trace": "mlp_h100_kineto.json.gz", "linked": 282, "ops": 288}


def test_kineto_rf_id_column_is_the_record_function_id(both):
    events = load(KINETO_FILES["mlp"])["traceEvents"]
    want = sorted((i, e["args"]["Record function id"], e["pid"]) for i, e in enumerate(events) if e.get("cat") == "cpu_op")
    assert sql(both, "SELECT seq, rf_id, process_id FROM nodes WHERE run_id = 'mlp' AND source_format = 'kineto' "
                     "ORDER BY seq") == want


def _fallback_pairs(wh, run: str) -> list[tuple]:
    return sql(wh, "SELECT e.seq, e.node_name, e.thread_id, e.params, k.seq, k.node_name, k.thread_id, k.params "
                   "FROM nodes e JOIN nodes k USING (run_id, process_id, rf_id) "
                   "WHERE run_id = ? AND e.source_format = 'chakra_et' AND k.source_format = 'kineto' "
                   "ORDER BY e.seq", run)


def test_fallback_without_record_function_ids_reproduces_the_raw_pairs(tmp_path):
    """The MLP pair with the Kineto trace's Record function ids withheld: the name-order
    fallback pairs exactly the ops the ids pair."""
    doc = load(KINETO_FILES["mlp"])
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Record function id", None)
    folder = run_folder(tmp_path, "mlp", ET_FILES["mlp"])
    with gzip.open(folder / "mlp_h100_kineto.json.gz", "wt") as f:
        json.dump(doc, f)
    assert ingest([tmp_path / "runs"], tmp_path / "wh").ok
    got = {(e, k) for e, _, _, _, k, _, _, _ in _fallback_pairs(tmp_path / "wh", "mlp")}
    assert got == raw_rf_pairs(load(ET_FILES["mlp"]), load(KINETO_FILES["mlp"])) and len(got) == 282
    meta = dict(sql(tmp_path / "wh", "SELECT path, metadata FROM files"))
    assert json.loads(meta["mlp_h100_kineto.json.gz"])["et_link"] == {
        "method": "name_order", "execution_trace": "mlp_h100_et.json.gz", "linked": 282, "ops": 282}


def test_fallback_join_of_the_older_pair(both):
    """linear: no Record function id in the Kineto trace (checked), 926 of the ET's 928 ops
    paired: same name, in order on each thread pair, equal autograd sequence numbers."""
    events = load(KINETO_FILES["linear"])["traceEvents"]
    assert not any("Record function id" in e.get("args", {}) for e in events)
    pairs = _fallback_pairs(both, "linear")
    assert len(pairs) == 926
    ops = [n for n in raw_nodes(load(ET_FILES["linear"])) if not n["name"].startswith(MARKER)]
    assert len(ops) == 928
    assert all(en == kn for _, en, _, _, _, kn, _, _ in pairs)
    assert len({p[4] for p in pairs}) == 926  # no Kineto op taken twice
    threads = {}
    for es, _, et, ep, ks, _, kt, kp in pairs:
        threads.setdefault((et, kt), []).append(ks)
        seq_id = json.loads(ep)["seq_id"]
        if seq_id >= 0 and kp and "Sequence number" in json.loads(kp):
            assert json.loads(kp)["Sequence number"] == seq_id
    assert {t: len(v) for t, v in threads.items()} == {(1, 24248): 309, (2, 24270): 617}
    # in order: the Kineto ops paired on a thread are in ET id order there too (by start)
    starts = dict(sql(both, "SELECT seq, start_ns FROM nodes WHERE run_id = 'linear' AND source_format = 'kineto'"))
    for ks in threads.values():
        assert [starts[k] for k in ks] == sorted(starts[k] for k in ks)


def test_tensor_flow_query_follows_values_from_writer_to_readers(both):
    want = raw_values(load(ET_FILES["mlp"]))
    rows = both.query("tensor_flow", run_id="mlp", limit=100000).to_pylist()
    assert len(rows) == sum(max(1, len(v[-1])) for v in want)
    got = sorted(((r["tensor_id"], r["writer_seq"], r["reader_seq"]) for r in rows), key=repr)
    assert got == sorted(((v[0], v[9], r) for v in want for r in (v[-1] or [None])), key=repr)
    # every read op of the ET has its Kineto start (all 282 ops pair); markers and
    # record_function ranges (no cpu_op) have none
    kineto = {e["args"]["Record function id"]: e for e in load(KINETO_FILES["mlp"])["traceEvents"]
              if e.get("cat") == "cpu_op"}
    rf = {n["id"]: n["attrs"]["rf_id"] for n in raw_nodes(load(ET_FILES["mlp"]))}
    for r in rows:
        if r["reader_seq"] is not None:
            assert (r["reader_start_ns"] is not None) == (rf[r["reader_seq"]] in kineto)
    assert both.query("tensor_flow", run_id="mlp", tensor_id=7, limit=1000).num_rows == sum(
        max(1, len(v[-1])) for v in want if v[0] == 7)


def test_et_alone_lands_as_untimed_nodes(both):
    assert sql(both, "SELECT count(*), count(start_ns), count(rf_id) FROM nodes WHERE run_id = 'alone'") == [(291, 0, 288)]
    assert sql(both, "SELECT count(*) FROM tensors WHERE run_id = 'alone'") == [(231,)]
    assert sql(both, "SELECT count(*) FROM kernels WHERE run_id = 'alone'") == [(0,)]
    (meta,) = sql(both, "SELECT metadata FROM files WHERE run_id = 'alone'")[0]
    assert "et_link" not in json.loads(meta) and json.loads(meta)["execution_trace"]["schema"] == "1.1.1-chakra.0.0.4"


BAD = {
    "truncated": (lambda text: text[: len(text) // 2], r"not valid JSON"),
    "node_without_id": (lambda text: text.replace('"id": 13,', '"idx": 13,', 1), r"node #\d+: `id` is missing"),
    "schema_2": (lambda text: text.replace('"schema": "1.1.1-chakra.0.0.4"', '"schema": "2.0.0"', 1),
                 r"schema '2.0.0' is not supported"),
    "bad_inputs": (lambda text: text.replace('"inputs": {"values": []', '"inputs": {"values": 5', 1),
                   r"node #\d+ \(id \d+\): inputs' values, shapes"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_execution_trace_is_a_one_line_error_and_the_batch_lands(tmp_path, name):
    make, pattern = BAD[name]
    text = gzip.decompress(ET_FILES["mlp"].read_bytes()).decode()
    bad = make(text)
    assert bad != text
    (tmp_path / "runs" / "bad").mkdir(parents=True)
    (tmp_path / "runs" / "bad" / "et.json").write_text(bad)
    run_folder(tmp_path, "good", ET_FILES["mlp"])
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    errors = dict(summary.errors)
    assert list(errors) == [str(tmp_path / "runs" / "bad" / "et.json")], errors
    message = errors[str(tmp_path / "runs" / "bad" / "et.json")]
    assert "\n" not in message and re.search(pattern, message), message
    assert sql(tmp_path / "wh", "SELECT run_id, count(*) FROM nodes GROUP BY 1") == [("good", 291)]


def test_migration_0009_on_a_schema6_lake(tmp_path):
    """main's frozen schema-6 lake: nodes and tensors gain the new columns (NULL), no row
    changes, and an execution-trace run then lands in it beside the old runs."""
    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema6", wh)
    with pytest.raises(TracedbError, match="0009_execution_traces"):
        catalog.connect(wh)
    before = duckdb_counts(wh)
    applied = migrate_warehouse(wh)
    # 0009 first; the migrations numbered after it (0010 marked step times, ...) apply too
    assert applied[0] == "0009_execution_traces" and applied == sorted(applied), applied
    assert all(name > "0009" for name in applied), applied
    con = catalog.connect(wh)
    assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in before} == before
    assert con.execute("SELECT count(rf_id), count(process_id), count(op_schema), count(parent_seq) FROM nodes"
                       ).fetchall() == [(0, 0, 0, 0)]
    assert con.execute("SELECT count(storage_id), count(consumer_seqs) FROM tensors").fetchall() == [(0, 0)]
    assert before["nodes"] > 0 and before["tensors"] > 0
    assert migrate_warehouse(wh) == []
    run_folder(tmp_path, "mlp", ET_FILES["mlp"], KINETO_FILES["mlp"])
    assert ingest([tmp_path / "runs"], wh).ok
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*) FROM nodes e JOIN nodes k USING (run_id, process_id, rf_id) "
                       "WHERE e.source_format = 'chakra_et' AND k.source_format = 'kineto'").fetchall() == [(282,)]
    # the old runs' files stay live after a later commit: nodes' 35 columns pass Delta's
    # default 32 with stats, and the migration names ingest_id as the stats column
    assert {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id <> 'mlp'").fetchone()[0] for t in before} == before


def duckdb_counts(wh: Path) -> dict[str, int]:
    """Rows of nodes and tensors in a lake tracedb cannot open yet (pending migration), by its parquet files."""
    import pyarrow.parquet as pq

    from tracedb.lake import Lake

    lake = Lake(wh)
    return {t: sum(pq.read_metadata(wh / r["path"]).num_rows for r in lake.add_actions(t).to_pylist())
            for t in ("nodes", "tensors")}


def test_runs_of_earlier_ingests_stay_live(tmp_path):
    """A new lake's nodes table (35 columns) keeps each file's ingest_id stats, so a run
    ingested earlier stays visible after later commits."""
    run_folder(tmp_path, "mlp", ET_FILES["mlp"], KINETO_FILES["mlp"])
    assert ingest([tmp_path / "runs"], tmp_path / "wh").ok
    alone = run_folder(tmp_path / "more", "alone")
    shutil.copy(ET_FILES["mlp"], alone / "et.json.gz")
    assert ingest([tmp_path / "more" / "runs"], tmp_path / "wh").ok
    assert sql(tmp_path / "wh", "SELECT run_id, count(*) FROM nodes GROUP BY 1 ORDER BY 1") == [
        ("alone", 291), ("mlp", 291 + 282)]
