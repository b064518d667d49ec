"""Throwaway parsers for the raw seed traces, written for the query tests only.

They share no code with tracedb's readers, so the canned queries' results can be checked
against numbers worked out straight from the files: a line-by-line protobuf-text walk
for TF StepStats, plain `json` (floats as Decimal, so µs -> ns is exact) for Kineto, and
plain-Python interval arithmetic.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from conftest import DATA, scenario


# ---- TensorFlow StepStats text ------------------------------------------------------

def parse_pbtxt(text: str) -> dict:
    """Protobuf text as nested dicts; every field is a list (fields may repeat)."""
    root: dict = {}
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            child: dict = {}
            stack[-1].setdefault(line[:-1].strip(), []).append(child)
            stack.append(child)
        else:
            key, _, value = line.partition(":")
            value = value.strip()
            if value.startswith('"'):
                value = value[1:-1]
            elif re.fullmatch(r"-?\d+", value):
                value = int(value)
            stack[-1].setdefault(key.strip(), []).append(value)
    return root


def one(d: dict, key: str, default=None):
    return d.get(key, [default])[0]


@dataclass
class Act:
    """One GPU activity (kernel, memcpy, memset) or host op, in integer ns."""

    device: str
    stream: int | None
    kind: str
    name: str
    node: str | None
    start: int
    dur: int
    step: int | None = None
    bytes: int | None = None
    copy_kind: str | None = None
    launch: int | None = None
    op_type: str | None = None

    @property
    def end(self) -> int:
        return self.start + self.dur


@dataclass
class TfTrace:
    kernels: list[Act]
    nodes: list[Act]
    allocations: list[tuple[str, str, int, int]]  # (device, allocator, ts_ns, bytes)
    tensors: list[dict]


@lru_cache(maxsize=None)
def tf(scenario_name: str = "tf_stepstats_gpu_streams") -> TfTrace:
    root = parse_pbtxt(scenario(scenario_name).read_text())
    stats = one(root, "step_stats", root)  # RunMetadata wraps StepStats
    kernels, nodes, allocations, tensors = [], [], [], []
    for dev in stats["dev_stats"]:
        name = one(dev, "device")
        stream = re.fullmatch(r"/device:GPU:(\d+)/stream:(\d+)", name)
        host = re.search(r"^/job:.*/device:(\w+):(\d+)$", name)
        for ns in dev.get("node_stats", []):
            start = one(ns, "all_start_micros") * 1000
            dur = one(ns, "all_end_rel_micros", 0) * 1000
            label = one(ns, "timeline_label", "")
            if stream:
                node, _, kname = one(ns, "node_name").partition(":")
                copy = re.match(r"MEMCPY(\w+) (\d+) bytes", label)
                if copy:  # a copy is named by its kind, however TF spelled the row's name
                    kname = "MEMCPY" + copy[1]
                kernels.append(Act(
                    f"GPU:{stream[1]}", int(stream[2]), "memcpy" if copy else "kernel", kname, node,
                    start, dur, step=0, bytes=int(copy[2]) if copy else None,
                    copy_kind=copy[1] if copy else None))
            elif host:
                device = f"{host[1]}:{host[2]}"
                op = re.search(r"\S = (\w+)\(", label)
                nodes.append(Act(device, None, "node", one(ns, "node_name"), one(ns, "node_name"),
                                 start, dur, step=0, op_type=op[1] if op else None))
                for mem in ns.get("memory", []):
                    for rec in mem.get("allocation_records", []):
                        allocations.append((device, one(mem, "allocator_name"),
                                            one(rec, "alloc_micros") * 1000, one(rec, "alloc_bytes")))
                for out in ns.get("output", []):
                    desc = one(out, "tensor_description", {})
                    alloc = one(desc, "allocation_description", {})
                    shape = [one(d, "size") for d in one(desc, "shape", {}).get("dim", [])]
                    tensors.append({
                        "device": device, "node_name": one(ns, "node_name"), "slot": one(out, "slot", 0),
                        "dtype": one(desc, "dtype"), "shape": shape,
                        "requested_bytes": one(alloc, "requested_bytes"),
                        "allocated_bytes": one(alloc, "allocated_bytes"),
                        "allocator": one(alloc, "allocator_name"),
                    })
    return TfTrace(kernels, nodes, allocations, tensors)


# ---- Kineto Chrome-trace JSON ------------------------------------------------------

def us_ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


@dataclass
class KinetoTrace:
    kernels: list[Act]
    nodes: list[Act]
    steps: dict[int, tuple[int, int]]  # N -> (start, end) of ProfilerStep#N


def load_kineto_json(path=None) -> dict:
    with gzip.open(path or scenario("kineto_h200_fp32"), "rt") as f:
        return json.load(f, parse_float=Decimal)


def kineto(doc: dict | None = None) -> KinetoTrace:
    """Kernels with their launching op, launch time and step, as Kineto links them:
    kernel -> correlation -> cuda runtime call -> External id -> cpu_op."""
    doc = doc if doc is not None else load_kineto_json()
    base = int(doc.get("baseTimeNanoseconds", 0))
    events = doc["traceEvents"]
    steps = {}
    for e in events:
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name")))
        # the CPU-side span; Kineto also writes a gpu_user_annotation of the same name
        # over the step's GPU work, which is not where the host ops run
        if m and e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation":
            steps[int(m[1])] = (base + us_ns(e["ts"]), base + us_ns(e["ts"]) + us_ns(e["dur"]))

    def step_at(t):
        return next((n for n, (s, e) in steps.items() if s <= t < e), None)

    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    nodes = [Act("CPU:0", None, "node", e["name"], e["name"], base + us_ns(e["ts"]), us_ns(e["dur"]),
                 step=step_at(base + us_ns(e["ts"])), op_type=e["name"])
             for e in events if e.get("cat") == "cpu_op"]
    kernels = []
    kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    for e in events:
        if e.get("cat") not in kinds:
            continue
        a = e["args"]
        call = runtime.get(a.get("correlation"))
        ext = a.get("External id", call["args"].get("External id") if call else None)
        op = ops.get(ext)
        launch = base + us_ns(call["ts"]) if call else None
        step = step_at(base + us_ns(op["ts"])) if op else (step_at(launch) if call else None)
        copy = re.match(r"Memcpy (\w+)", e["name"])
        kernels.append(Act(
            f"GPU:{a['device']}", a["stream"], kinds[e["cat"]], e["name"], op["name"] if op else None,
            base + us_ns(e["ts"]), us_ns(e["dur"]), step=step,
            bytes=a.get("bytes") if e["cat"] != "kernel" else None,
            copy_kind=copy[1] if copy and e["cat"] == "gpu_memcpy" else None, launch=launch))
    return KinetoTrace(kernels, nodes, steps)


@lru_cache(maxsize=None)
def kineto_seed() -> KinetoTrace:
    return kineto()


# ---- interval arithmetic -----------------------------------------------------------

def union(intervals) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals) -> int:
    return sum(e - s for s, e in intervals)


def intersect(a: tuple[int, int], islands) -> int:
    return sum(max(0, min(a[1], e) - max(a[0], s)) for s, e in islands)


def quantile_cont(values, q: float) -> float:
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# ---------------------------------------------------------------- shared by the query tests

TF = "tf_stepstats_gpu_streams"
KINETO = "kineto_h200_fp32"


def rows(name, wh, **params) -> list[dict]:
    """A canned query's result rows on a warehouse."""
    from tracedb.query import run_query

    return run_query(name, params, wh).to_pylist()


def raw(run: str):
    """The independently parsed trace behind one of the seed warehouse's runs."""
    return tf() if run == TF else kineto_seed()


# ---- Kineto: every event's table, and exact kernel -> op links ------------------------

_OLD_KINETO = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
               "Runtime": "cuda_runtime", "Driver": "cuda_driver", "Operator": "cpu_op"}
KINETO_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")


def kineto_cat(e: dict):
    return _OLD_KINETO.get(e.get("cat"), e.get("cat"))


def kineto_table(e: dict) -> str | None:
    """The table an event belongs in, by the issue's rules (None: not stored)."""
    cat, ph = kineto_cat(e), e.get("ph")
    if ph == "M" or cat in ("ac2g", "async_gpu", "async_cpu_to_gpu"):
        return None
    if ph == "X" and cat == "cpu_op":
        return "nodes"
    if ph == "X" and cat in KINETO_ACTIVITY:
        return "kernels"
    if ph == "X" and isinstance(cat, str) and re.search(r"_(runtime|driver)$", cat):
        return "runtime_calls"
    if ph == "X" and cat in ("user_annotation", "gpu_user_annotation"):
        return "annotations"
    if ph in ("i", "I") and e.get("name") == "[memory]":
        return "allocations"
    return "events"


def kineto_links(doc: dict) -> list[tuple[int, str, int | None, str | None]]:
    """(start ns, name, launching op's event index, link) of every device activity, by
    brute force: the runtime call with the activity's correlation, then the cpu_op on
    the call's (pid, tid) that encloses the call with the latest start (ties: the
    shorter, then the later in the file); External id only without a call, or when the
    call has no enclosing op and that op's span holds the call's start."""
    base = int(doc.get("baseTimeNanoseconds", 0))
    events = doc["traceEvents"]
    ops_by_thread: dict = {}
    ext_op: dict = {}
    calls: dict = {}
    for i, e in enumerate(events):
        if e.get("ph") != "X":
            continue
        cat, args = kineto_cat(e), e.get("args") or {}
        if cat == "cpu_op":
            s = us_ns(e["ts"])
            op = (s, s + us_ns(e["dur"]), i)
            ops_by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(op)
            ext = args.get("External id", args.get("external id"))
            if isinstance(ext, int):
                ext_op.setdefault(ext, op)
        elif isinstance(cat, str) and re.search(r"_(runtime|driver)$", cat) and isinstance(args.get("correlation"), int):
            calls.setdefault(args["correlation"], (e, us_ns(e["ts"]), us_ns(e["ts"]) + us_ns(e["dur"])))
    out = []
    for e in events:
        if e.get("ph") != "X" or kineto_cat(e) not in KINETO_ACTIVITY:
            continue
        args = e.get("args") or {}
        ext = args.get("External id", args.get("external id"))
        call = calls.get(args.get("correlation"))
        op, link = None, None
        if call:
            ce, cs, cend = call
            if ext is None:
                ext = (ce.get("args") or {}).get("External id", (ce.get("args") or {}).get("external id"))
            inside = [o for o in ops_by_thread.get((ce.get("pid"), ce.get("tid")), []) if o[0] <= cs and cend <= o[1]]
            if inside:
                op, link = max(inside, key=lambda o: (o[0], -o[1], o[2])), "launch"
        if op is None and isinstance(ext, int) and ext in ext_op:
            cand = ext_op[ext]
            if call is None or cand[0] <= call[1] <= cand[1]:
                op, link = cand, "external_id"
        out.append((base + us_ns(e["ts"]), e["name"], op[2] if op else None, link))
    return out


def load_json_trace(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


# ---- Nsight Systems SQLite exports: plain sqlite3 queries -----------------------------

NSYS_NVFUSER = DATA / "nsys_nvfuser_h200" / "nvfuser_h200_report1.sqlite"
NSYS_SAXPY = DATA / "nsys_saxpy_mpi_a100" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
NSYS_COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


def nsys_sql(path, sql: str) -> list[tuple]:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def nsys_base(path) -> int:
    """Session start, epoch ns: what the export's timestamps count from."""
    return nsys_sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]


def nsys_kernels(path) -> list[tuple]:
    """(device, stream, name, short name, start ns, duration ns, grid, block, registers,
    shared memory, correlation) of every kernel, absolute times."""
    base = nsys_base(path)
    return [(f"GPU:{r[0]}", r[1], r[2], r[3], base + r[4], r[5] - r[4], [r[6], r[7], r[8]], [r[9], r[10], r[11]],
             r[12], r[13], r[14])
            for r in nsys_sql(path, """
                SELECT k.deviceId, k.streamId, d.value, s.value, k.start, k.end, gridX, gridY, gridZ,
                       blockX, blockY, blockZ, registersPerThread, staticSharedMemory + dynamicSharedMemory,
                       correlationId
                FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
                JOIN StringIds s ON s.id = k.shortName""")]


def nsys_copies(path) -> list[tuple]:
    """(kind, device, stream, bytes, copy kind, start ns, duration ns) of every memcpy and memset."""
    base = nsys_base(path)
    out = [("memcpy", f"GPU:{d}", s, b, NSYS_COPY_KINDS.get(k), base + st, en - st) for d, s, b, k, st, en in
           nsys_sql(path, "SELECT deviceId, streamId, bytes, copyKind, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY")]
    has_memset = nsys_sql(path, "SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMSET'")[0][0]
    if has_memset:
        out += [("memset", f"GPU:{d}", s, b, None, base + st, en - st) for d, s, b, st, en in
                nsys_sql(path, "SELECT deviceId, streamId, bytes, start, end FROM CUPTI_ACTIVITY_KIND_MEMSET")]
    return out


def nsys_runtime(path) -> list[tuple]:
    """(category, name without its _vNNNN suffix, start ns, duration ns, tid, correlation)
    of every CUDA runtime / driver call (eventClass 67 rows are backtraces of a call)."""
    base = nsys_base(path)
    return [("cuda_driver" if cls == 1 else "cuda_runtime", re.sub(r"_v\d{4,}$", "", name), base + st, en - st,
             gtid % (1 << 24), corr)
            for cls, name, st, en, gtid, corr in nsys_sql(path, """
                SELECT eventClass, s.value, start, end, globalTid, correlationId
                FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                WHERE eventClass <> 67""")]  # 67: a call's CUDA backtrace record, not a call


def nsys_ranges(path) -> list[tuple]:
    """(name, start ns, duration ns or None, tid, domain name or None) of every NVTX
    push/pop (59) and start/end (60) range; a range's name is its text or its StringId."""
    base = nsys_base(path)
    return [(name, base + st, None if en is None else en - st, gtid % (1 << 24), dom)
            for name, st, en, gtid, dom in nsys_sql(path, """
                SELECT coalesce(n.text, s.value), n.start, n.end, n.globalTid,
                       (SELECT d.text FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.domainId = n.domainId)
                FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                WHERE n.eventType IN (59, 60)""")]


def nsys_launches(path) -> list[tuple]:
    """(kernel start ns, correlation, its launch call's start ns, API name, innermost NVTX
    push/pop range on the call's thread holding the call's start, cut at ', seq = ' etc.)
    of every kernel, memcpy and memset, by brute force in SQL."""
    base = nsys_base(path)
    acts = " UNION ALL ".join(
        f"SELECT start, correlationId, globalPid FROM {t}" for t in
        ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    rows = nsys_sql(path, f"""
        SELECT a.start, a.correlationId, r.start, s.value,
               (SELECT coalesce(n.text, ns.value) FROM NVTX_EVENTS n LEFT JOIN StringIds ns ON ns.id = n.textId
                WHERE n.eventType = 59 AND n.globalTid = r.globalTid AND n.start <= r.start
                  AND r.start <= coalesce(n.end, 9223372036854775807)
                ORDER BY n.start DESC, n.end ASC LIMIT 1)
        FROM ({acts}) a
        LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = a.correlationId AND r.globalTid / 16777216 = a.globalPid / 16777216
             AND r.eventClass <> 67
        LEFT JOIN StringIds s ON s.id = r.nameId""")
    cut = lambda n: re.split(r", (?:seq|op_id|sizes|stashed seq) = ", n)[0] if n else n  # noqa: E731
    return [(base + st, corr, None if cs is None else base + cs, name, cut(op)) for st, corr, cs, name, op in rows]


# Every column of the nsys reader's runtime_calls and annotations rows, worked out from the
# export by SQL (correlated subqueries, no sweep) and the module docstring's rules.

NSYS_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                  6: "Managed Static", 7: "Unknown"}
_INNERMOST_RANGE = """(SELECT coalesce(n.text, ns.value) FROM NVTX_EVENTS n LEFT JOIN StringIds ns ON ns.id = n.textId
                       WHERE n.eventType = 59 AND n.globalTid = {gtid} AND n.start <= {t}
                         AND {t} <= coalesce(n.end, 9223372036854775807)
                       ORDER BY n.start DESC, n.end ASC LIMIT 1)"""


def _compact(d: dict) -> str | None:
    return json.dumps(d, separators=(",", ":")) if d else None


def nsys_activities(path) -> list[tuple]:
    """(start, end, correlation, pid, device, name) of every kernel, memcpy and memset, by
    (start, end): a kernel's name is its demangled name, a copy's `Memcpy HtoD (Pageable ->
    Device)`, a set's `Memset (Device)` (its memory kind)."""
    out = [(st, en, corr, (gpid >> 24) & 0xFFFFFF, dev, name) for st, en, corr, gpid, dev, name in nsys_sql(path, """
        SELECT k.start, k.end, k.correlationId, k.globalPid, k.deviceId, d.value
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName""")]
    out += [(st, en, corr, (gpid >> 24) & 0xFFFFFF, dev,
             f"Memcpy {NSYS_COPY_KINDS[kind]} ({NSYS_MEM_KINDS[src]} -> {NSYS_MEM_KINDS[dst]})")
            for st, en, corr, gpid, dev, kind, src, dst in nsys_sql(path, """
                SELECT start, end, correlationId, globalPid, deviceId, copyKind, srcKind, dstKind
                FROM CUPTI_ACTIVITY_KIND_MEMCPY""")]
    if nsys_sql(path, "SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMSET'")[0][0]:
        out += [(st, en, corr, (gpid >> 24) & 0xFFFFFF, dev, f"Memset ({NSYS_MEM_KINDS[kind]})")
                for st, en, corr, gpid, dev, kind in nsys_sql(path, """
                    SELECT start, end, correlationId, globalPid, deviceId, memKind FROM CUPTI_ACTIVITY_KIND_MEMSET""")]
    return sorted(out, key=lambda a: (a[0], a[1]))


def nsys_step_spans(path, step_rx: str) -> list[tuple]:
    """(pid, start, end, step) of every NVTX range (push/pop or start/end) whose whole name
    matches step_rx (its group: the step number)."""
    spans = []
    for name, st, en, gtid in nsys_sql(path, """
            SELECT coalesce(n.text, s.value), n.start, n.end, n.globalTid FROM NVTX_EVENTS n
            LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL"""):
        m = re.fullmatch(step_rx, name or "")
        if m:
            spans.append(((gtid >> 24) & 0xFFFFFF, st, en, int(m[1])))
    return spans


def _step(spans: list[tuple], pid: int, t: int) -> int | None:
    """The step of the latest-starting step range of the process that holds t."""
    holding = [(st, en, n) for p, st, en, n in spans if p == pid and st <= t <= en]
    return max(holding)[2] if holding else None


def nsys_call_rows(path, rank, step_rx: str = r"step (\d+)") -> list[dict]:
    """Every runtime_calls column of every CUDA runtime / driver call, by (start, end)."""
    base, acts, spans = nsys_base(path), nsys_activities(path), nsys_step_spans(path, step_rx)
    cut = lambda n: re.split(r", (?:seq|op_id|sizes|stashed seq) = ", n)[0] if n else n  # noqa: E731
    rows = nsys_sql(path, f"""
        SELECT r.start, r.end, r.globalTid, r.eventClass, r.correlationId, s.value, r.returnValue,
               coalesce(r.callchainId, (SELECT b.callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME b
                                        WHERE b.eventClass = 67 AND b.correlationId = r.correlationId
                                          AND b.globalTid >> 24 = r.globalTid >> 24)),
               {_INNERMOST_RANGE.format(gtid="r.globalTid", t="r.start")}
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        WHERE r.eventClass <> 67 ORDER BY r.start, r.end""")
    out = []
    for seq, (st, en, gtid, cls, corr, raw, ret, chain, op) in enumerate(rows):
        pid = (gtid >> 24) & 0xFFFFFF  # globalTid: pid in bits 24-47, tid in 0-23
        name = re.sub(r"_v\d{4,}$", "", raw)
        launched = [a for a in acts if corr is not None and a[2] == corr and a[3] == pid]
        category = {0: "cuda_runtime", 1: "cuda_driver"}.get(cls) or (
            "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime")
        params = {"api_name": raw if raw != name else None, "pid": pid, "return_value": ret or None,
                  "callchain_id": chain}
        out.append({
            "device": "CPU:0", "device_raw": "CPU", "rank": rank, "step": _step(spans, pid, st),
            "category": category, "name": name, "start_ns": base + st, "duration_ns": en - st,
            "thread_id": gtid & 0xFFFFFF, "correlation_id": corr, "node_name": cut(op),
            "kernel_name": launched[0][5] if launched else None, "kernel_count": len(launched),
            "kernel_start_ns": base + launched[0][0] if launched else None,
            "kernel_device": f"GPU:{launched[0][4]}" if launched else None, "seq": seq,
            "params": _compact({k: v for k, v in params.items() if v is not None})})
    return out


def nsys_annotation_rows(path, rank, step_rx: str = r"step (\d+)") -> list[dict]:
    """Every annotations column of every NVTX push/pop (59) and start/end (60) range, by
    (start, end): params are the domain (named by its 75 event), the category (named by
    its 33 event in the domain, else in domain 0), the color, the last non-NULL payload,
    the range kind and id, the ending thread when another, and the pid."""
    base, spans = nsys_base(path), nsys_step_spans(path, step_rx)
    payloads = ("int64Value", "uint64Value", "doubleValue", "int32Value", "uint32Value", "floatValue", "jsonText")
    rows = nsys_sql(path, f"""
        SELECT coalesce(n.text, s.value), n.start, n.end, n.eventType, n.globalTid, n.endGlobalTid, n.rangeId,
               n.color, n.domainId,
               (SELECT d.text FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.domainId = n.domainId),
               n.category,
               coalesce((SELECT c.text FROM NVTX_EVENTS c WHERE c.eventType = 33 AND c.domainId = n.domainId
                           AND c.category = n.category),
                        (SELECT c.text FROM NVTX_EVENTS c WHERE c.eventType = 33 AND c.domainId = 0
                           AND c.category = n.category)),
               {", ".join(f"n.{p}" for p in payloads)}
        FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        WHERE n.eventType IN (59, 60) ORDER BY n.start, n.end""")
    out = []
    for seq, row in enumerate(rows):
        name, st, en, kind, gtid, end_gtid, range_id, color, dom, dom_name, cat, cat_name, *pay = row
        params = {}
        if dom:
            params["domain"] = dom_name or f"domain {dom}"
        if cat is not None:
            params["nvtx_category"] = cat_name or cat
        if color is not None:
            params["color"] = "#%08x" % (color % (1 << 32))
        filled = [(p, v) for p, v in zip(payloads, pay) if v is not None]
        if filled:
            params["payload"] = filled[-1][1]
            params["payload_type"] = filled[-1][0].replace("Value", "").replace("Text", "")
        params["range"] = "push_pop" if kind == 59 else "start_end"
        if range_id is not None:
            params["range_id"] = range_id
        if end_gtid is not None and end_gtid != gtid:
            params["end_thread_id"] = end_gtid & 0xFFFFFF
        params["pid"] = (gtid >> 24) & 0xFFFFFF
        out.append({
            "device": "CPU:0", "device_raw": "CPU", "rank": rank, "step": _step(spans, (gtid >> 24) & 0xFFFFFF, st),
            "category": "nvtx", "name": name, "start_ns": base + st, "duration_ns": None if en is None else en - st,
            "thread_id": gtid & 0xFFFFFF, "seq": seq, "params": _compact(params)})
    return out
