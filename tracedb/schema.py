"""The warehouse schema as code: Arrow schemas of every view and the schema version.

Times are integer nanoseconds, sizes integer bytes (contract). `docs/schema.md` is
generated from this module (`python -m tracedb.docs`) and a test keeps the two in sync.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 10  # 2: Delta Lake tables (0004); 3: every Kineto category, exact links, kernel types (0005); 4: rollups (0006);
# 5: rollup_collectives (0007); 6: interval rollups (0008); 7: PyTorch execution traces: nodes' rf_id, process_id,
# op_schema, parent_seq; tensors' storage, strides, producer and consumers (0009);
# host step time from the step markers (0010); `acceptances`, the report's accepted changes (0011);
# FLOPs and bytes per op on `nodes` (0012: flops_rule, flops_dtype, flops_counted; flops / memory_bytes
# filled for every format a rule of tracedb/flops.py covers)
# 8: data tables unpartitioned, files of many runs ordered by run_id with run_id/device stats (0013)
# 9: the lake names the files that may hold dead rows, _tracedb/dead_rows.json (0014)
# 10: per-run rollups of the fleet-wide queries that aggregated raw rows (0015: kernel_names, kernel_histogram,
# op_summary, nccl_bandwidth, memcpy_summary, run_summary, step_flops)

_SHAPE = pa.list_(pa.int64())
_STRS = pa.list_(pa.string())


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"doc": doc})


# Columns every parquet-backed table starts with. run_id/device are also the partition keys.
_COMMON = [
    _f("run_id", pa.string(), "run the row belongs to"),
    _f("device", pa.string(), "canonical device TYPE:INDEX, e.g. GPU:0, CPU:0"),
    _f("device_raw", pa.string(), "device string as the source wrote it"),
    _f("rank", pa.int32(), "distributed rank of the process that wrote the trace, when known"),
    _f("step", pa.int64(), "training/inference step (ProfilerStep#N, or the step file's ordinal)"),
]

_TAIL = [
    _f("source_format", pa.string(), "reader that produced the row (tf_stepstats, megengine, kineto, ...)"),
    _f("source_file", pa.string(), "trace file the row came from, relative to the ingested path"),
]

NODES = pa.schema(
    _COMMON
    + [
        _f("node_name", pa.string(), "framework op / graph node name"),
        _f("op_type", pa.string(), "op type (MatMul, Conv2D, aten::mm, ...)"),
        _f("start_ns", pa.int64(), "start time, ns (NULL when the source has no timing)"),
        _f("duration_ns", pa.int64(), "whole execution time, ns (NULL when untimed)"),
        _f("thread_id", pa.int64(), "host thread id"),
        _f("seq", pa.int64(), "position of the node in its source (file order / execution order)"),
        _f("op_start_ns", pa.int64(), "start of the op's compute part, ns (TF op_start_rel)"),
        _f("op_end_ns", pa.int64(), "end of the op's compute part, ns (TF op_end_rel)"),
        _f("scheduled_ns", pa.int64(), "time the node was scheduled, ns"),
        _f("timeline_label", pa.string(), "source's label, e.g. `name = Op(inputs)`"),
        _f("inputs", _STRS, "data inputs (names)"),
        _f("control_inputs", _STRS, "control inputs (`^name` in dumps)"),
        _f("outputs", _STRS, "output names"),
        _f("input_shapes", pa.list_(_SHAPE), "input shapes"),
        _f("input_dtypes", _STRS, "input dtypes"),
        _f("output_shapes", pa.list_(_SHAPE), "output shapes"),
        _f("output_dtypes", _STRS, "output dtypes"),
        _f("flops", pa.int64(), "floating point operations of the op (`flops_rule` says from what: a formula of tracedb/flops.py, the profiler, MegEngine footprint)"),
        _f("memory_bytes", pa.int64(), "memory traffic, bytes (MegEngine footprint; else inputs + output x element size where a FLOPs rule knows the shapes)"),
        _f("temp_memory_bytes", pa.int64(), "temporary memory, bytes (TF)"),
        _f("persistent_memory_bytes", pa.int64(), "persistent memory, bytes (TF)"),
        _f("correlation_id", pa.int64(), "External id / correlation linking to kernels"),
        _f("params", pa.string(), "further attributes as JSON"),
        _f("rf_id", pa.int64(),
           "PyTorch record-function id (Kineto's `Record function id`, an execution trace's `rf_id`): "
           "a process's Kineto op and execution-trace op with equal rf_id are the same op"),
        _f("process_id", pa.int64(), "host process id (Kineto's pid, an execution trace's pid)"),
        _f("op_schema", pa.string(), "the op's schema, e.g. `aten::mm(Tensor self, Tensor mat2) -> Tensor`"),
        _f("parent_seq", pa.int64(), "`seq` of the enclosing node (an execution trace's parent node)"),
        _f("flops_rule", pa.string(), "where `flops` (and `memory_bytes`: inputs + output x element size) came from: "
           "matmul | conv | sdpa (rules of tracedb/flops.py) | reported (the source's own figure); NULL: unknown, counts zero"),
        _f("flops_dtype", pa.string(), "precision of the op's inputs for the datasheet peak: fp32 | bf16 | fp16 | fp8 | fp64 | int8"),
        _f("flops_counted", pa.bool_(), "true: totals count this op's FLOPs; false: an op inside it (same thread) carries them (aten::linear > aten::mm)"),
    ]
    + _TAIL
)

KERNELS = pa.schema(
    _COMMON
    + [
        _f("stream", pa.int64(), "GPU stream"),
        _f("kind", pa.string(), "kernel | memcpy | memset"),
        _f("name", pa.string(), "kernel name (or copy kind)"),
        _f("node_name", pa.string(), "op that launched it, when known"),
        _f("start_ns", pa.int64(), "start, ns"),
        _f("duration_ns", pa.int64(), "duration, ns"),
        _f("bytes", pa.int64(), "bytes moved or set (copies and sets)"),
        _f("copy_kind", pa.string(), "HtoD | DtoH | DtoD | HtoH | PtoP, for copies"),
        _f("correlation_id", pa.int64(), "launch correlation id"),
        _f("launch_start_ns", pa.int64(), "start of the host launch call, ns, when known"),
        _f("grid", _SHAPE, "grid dimensions"),
        _f("block", _SHAPE, "block dimensions"),
        _f("registers_per_thread", pa.int64(), "registers per thread"),
        _f("shared_memory_bytes", pa.int64(), "shared memory, bytes"),
        _f("occupancy", pa.float64(), "estimated achieved occupancy, %"),
        _f("kern_ns", pa.int64(), "MegEngine `kern` timestamp, ns"),
        _f("params", pa.string(), "further attributes as JSON"),
        _f("kernel_type", pa.string(),
           "communication | memory | computation, by name and kind (rules in tracedb/kernel_types.py)"),
        _f("kernel_category", pa.string(),
           "gemm | convolution | attention | elementwise | reduction | communication | memory | other"),
        _f("node_seq", pa.int64(), "`seq` of the launching op's `nodes` row (same run and source_file)"),
        _f("link", pa.string(),
           "how node_name was found: launch (launch call's innermost enclosing op; nsys: NVTX range) | external_id"),
        _f("external_id", pa.int64(), "the activity's (else its launch call's) External id, as written"),
    ]
    + _TAIL
)

TENSORS = pa.schema(
    _COMMON
    + [
        _f("node_name", pa.string(), "node that produced the tensor"),
        _f("slot", pa.int64(), "output slot"),
        _f("tensor_name", pa.string(), "tensor / var name when the source names it"),
        _f("tensor_id", pa.int64(), "source's tensor / var id"),
        _f("dtype", pa.string(), "element type (float32, int32, ...)"),
        _f("shape", _SHAPE, "shape"),
        _f("requested_bytes", pa.int64(), "bytes requested"),
        _f("allocated_bytes", pa.int64(), "bytes allocated"),
        _f("allocator", pa.string(), "allocator name"),
        _f("allocation_id", pa.int64(), "allocation id"),
        _f("ptr", pa.int64(), "device address"),
        _f("params", pa.string(), "further attributes as JSON"),
        _f("storage_id", pa.int64(), "id of the storage the tensor views (execution trace)"),
        _f("storage_offset", pa.int64(), "offset into the storage, elements"),
        _f("numel", pa.int64(), "element count"),
        _f("element_bytes", pa.int64(), "size of one element, bytes"),
        _f("strides", _SHAPE, "strides, elements"),
        _f("node_seq", pa.int64(),
           "`seq` of the node that wrote this value of the tensor (NULL: written before the trace began)"),
        _f("consumer_seqs", _SHAPE, "`seq` of each node that read this value (ascending)"),
    ]
    + _TAIL
)

ALLOCATIONS = pa.schema(
    _COMMON
    + [
        _f("allocator", pa.string(), "allocator name"),
        _f("node_name", pa.string(), "node / op / owner the memory belongs to"),
        _f("ts_ns", pa.int64(), "time of the event, ns (NULL for a planned chunk)"),
        _f("bytes", pa.int64(), "bytes, negative for a free"),
        _f("address", pa.int64(), "device address"),
        _f("total_allocated_bytes", pa.int64(), "allocator's total allocated after the event"),
        _f("total_reserved_bytes", pa.int64(), "allocator's total reserved after the event"),
        _f("kind", pa.string(), "alloc | free | chunk"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

RUNTIME_CALLS = pa.schema(
    _COMMON
    + [
        _f("category", pa.string(), "source category: cuda_runtime | cuda_driver | mtia_runtime | ..."),
        _f("name", pa.string(), "API call (cudaLaunchKernel, hipMemcpyWithStream, ...)"),
        _f("start_ns", pa.int64(), "start, ns"),
        _f("duration_ns", pa.int64(), "duration of the call on the host, ns"),
        _f("thread_id", pa.int64(), "host thread id"),
        _f("correlation_id", pa.int64(), "correlation id shared with the device activity it launched"),
        _f("external_id", pa.int64(), "External id, as written"),
        _f("node_name", pa.string(), "innermost op enclosing the call on its thread"),
        _f("node_seq", pa.int64(), "`seq` of that op's `nodes` row"),
        _f("kernel_name", pa.string(), "device activity it launched (the first, if several)"),
        _f("kernel_count", pa.int64(), "device activities with its correlation id (0 for a non-launch)"),
        _f("kernel_start_ns", pa.int64(), "start of the first activity it launched, ns"),
        _f("kernel_device", pa.string(), "device of that activity"),
        _f("seq", pa.int64(), "position of the event in its source"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

ANNOTATIONS = pa.schema(
    _COMMON
    + [
        _f("category", pa.string(), "user_annotation (host range) | gpu_user_annotation (device range) | nvtx (Nsight Systems NVTX range, its domain in params)"),
        _f("name", pa.string(), "range name (record_function label, ProfilerStep#N, ...)"),
        _f("start_ns", pa.int64(), "start, ns"),
        _f("duration_ns", pa.int64(), "duration, ns"),
        _f("thread_id", pa.int64(), "host thread id (host ranges)"),
        _f("stream", pa.int64(), "device stream (device ranges)"),
        _f("external_id", pa.int64(), "External id"),
        _f("seq", pa.int64(), "position of the event in its source"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

STEPS = pa.schema(
    _COMMON
    + [
        _f("name", pa.string(), "the step's range name (ProfilerStep#N; nsys: the NVTX range, e.g. step N)"),
        _f("start_ns", pa.int64(), "host span start, ns"),
        _f("duration_ns", pa.int64(), "host span duration, ns"),
        _f("thread_id", pa.int64(), "host thread of the span"),
        _f("device_start_ns", pa.int64(), "start of the step's device work (activities launched in the step), ns"),
        _f("device_end_ns", pa.int64(), "end of the step's device work, ns"),
        _f("kernel_count", pa.int64(), "device activities launched in the step"),
    ]
    + _TAIL
)

EVENTS = pa.schema(
    _COMMON
    + [
        _f("category", pa.string(), "source category (cuda_sync, cpu_instant_event, python_function, ...)"),
        _f("name", pa.string(), "event name"),
        _f("phase", pa.string(), "Chrome-trace ph: X (span), i (instant), s/f (flow), ..."),
        _f("start_ns", pa.int64(), "start (or instant), ns"),
        _f("duration_ns", pa.int64(), "duration, ns (NULL for instants)"),
        _f("thread_id", pa.int64(), "thread id (host events)"),
        _f("stream", pa.int64(), "device stream (device events such as cuda_sync)"),
        _f("correlation_id", pa.int64(), "correlation (or flow) id"),
        _f("external_id", pa.int64(), "External id"),
        _f("seq", pa.int64(), "position of the event in its source"),
        _f("params", pa.string(), "the event's args as JSON"),
    ]
    + _TAIL
)

# Rollups: derived per-run tables that tracedb computes at ingest from the run's own
# `kernels` rows with the metric's SQL (sql/metrics/<query>.sql, see tracedb.rollups), so
# that fleet-wide canned queries read a few rows per run instead of ordering every
# activity row. Partitioned and published like the other data tables (a run's rollup is
# always of its live ingest). `kind`: the activity kind the row counts, NULL for all.
_ROLLUP_KIND = _f("kind", pa.string(),
                  "only activity of this kind (kernel | memcpy | memset) counted; NULL: all GPU activity")

ROLLUP_GPU_BUSY_IDLE = pa.schema([
    _COMMON[0], _COMMON[1], _COMMON[3], _COMMON[4], _ROLLUP_KIND,
    _f("activities", pa.int64(), "activities overlapping the window"),
    _f("activity_ns", pa.int64(), "their summed duration, clipped to the window, ns"),
    _f("start_ns", pa.int64(), "window start: the step's first activity start, ns"),
    _f("end_ns", pa.int64(), "window end: the next step's window start (the last: the device's last end), ns"),
    _f("span_ns", pa.int64(), "end_ns - start_ns"),
    _f("busy_ns", pa.int64(), "union of the activity intervals in the window, ns"),
    _f("idle_ns", pa.int64(), "span_ns - busy_ns"),
    _f("busy_pct", pa.float64(), "100 * busy_ns / span_ns, 2 decimals"),
    _f("busy_intervals", pa.int64(), "disjoint busy intervals in the window"),
    _f("device_step_ns", pa.int64(), "span_ns when the window is a step's, else NULL"),
])

ROLLUP_STREAM_OVERLAP = pa.schema([
    _COMMON[0], _COMMON[1], _ROLLUP_KIND,
    _f("streams", pa.int64(), "streams with activity (no stream id: one stream)"),
    _f("busy_ns", pa.int64(), "time 1 or more streams were active, ns"),
    _f("overlap_ns", pa.int64(), "time 2 or more streams were active, ns"),
    _f("overlap_pct", pa.float64(), "100 * overlap_ns / busy_ns, 2 decimals"),
    _f("max_active_streams", pa.int64(), "most streams active at once"),
    _f("mean_active_streams", pa.float64(), "time-weighted mean of active streams while busy, 3 decimals"),
])

# No `kind`: collectives are kernels (`kind = 'kernel'`) by definition.
ROLLUP_COLLECTIVES = pa.schema([
    _COMMON[0], _COMMON[1],
    _f("name", pa.string(), "the collective kernel's name (NCCL/RCCL, all-reduce, all-gather, reduce-scatter, all-to-all)"),
    _f("instances", pa.int64(), "times it ran on the device"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("kernel_time_pct", pa.float64(), "100 * total_ns / all kernel time of the device, 2 decimals"),
    _f("overlapped_ns", pa.int64(), "time non-collective kernels ran at the same time (other streams), ns"),
    _f("exposed_ns", pa.int64(), "total_ns - overlapped_ns"),
    _f("overlap_pct", pa.float64(), "100 * overlapped_ns / total_ns, 2 decimals"),
])

# Per source file and stream: a stream's queue is a file's (rank too: a file's), and
# idle_time_breakdown adds the files of a (rank, device, stream) up from these sums.
# NULL idle columns: no gap (one timed activity); NULL queue columns: no launch times.
ROLLUP_STREAM_TIME = pa.schema([
    _COMMON[0], _COMMON[1], _COMMON[3],
    _f("source_file", pa.string(), "trace file of the stream's activity"),
    _f("stream", pa.int64(), "GPU stream"),
    _f("host_wait_ns", pa.int64(), "gaps whose next activity's launch call started after the previous activity ended, summed, ns"),
    _f("host_wait_gaps", pa.int64(), "their number"),
    _f("kernel_wait_ns", pa.int64(), "other gaps shorter than 30 us (idle_time_breakdown's default kernel_wait_ns), summed, ns"),
    _f("kernel_wait_gaps", pa.int64(), "their number"),
    _f("other_ns", pa.int64(), "the remaining gaps, summed, ns"),
    _f("other_gaps", pa.int64(), "their number"),
    _f("changes", pa.int64(), "queue length changes (launches and starts)"),
    _f("mean", pa.float64(), "mean queue length over the changes, 4 decimals"),
    _f("min", pa.int64(), "shortest queue"),
    _f("p25", pa.float64(), "25th percentile of the queue length over the changes"),
    _f("p50", pa.float64(), "median queue length over the changes"),
    _f("p75", pa.float64(), "75th percentile of the queue length over the changes"),
    _f("max", pa.int64(), "longest queue"),
    _f("time_weighted_mean", pa.float64(), "time-weighted mean queue length, 4 decimals"),
])

# What `memory_bandwidth` reports for the whole run (its rows are each one run's).
ROLLUP_MEMORY_BANDWIDTH = pa.schema([
    _COMMON[0], _COMMON[1], _COMMON[3],
    _f("copy_type", pa.string(), "Memcpy HtoD | DtoH | DtoD | ... | Unknown, or Memset"),
    _f("copies", pa.int64(), "copies (or sets) of that type"),
    _f("bytes", pa.int64(), "bytes they moved or set"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("gbps", pa.float64(), "bytes / total_ns (GB/s), 3 decimals"),
    _f("points", pa.int64(), "changes of the summed bandwidth where it is above zero"),
    _f("mean_gbps", pa.float64(), "mean summed bandwidth over those changes, GB/s, 3 decimals"),
    _f("min_gbps", pa.float64(), "least of them, GB/s, 3 decimals"),
    _f("max_gbps", pa.float64(), "most of them, GB/s, 3 decimals"),
])

# The interval unions of kernel_type_breakdown, temporal_breakdown and comm_comp_overlap
# (one ordered pass over a device's activity serves all three); no `kind`: each query
# selects its own kinds and types.
ROLLUP_DEVICE_TIME = pa.schema([
    _COMMON[0], _COMMON[1], _COMMON[3],
    _f("span_ns", pa.int64(), "the device's first activity start to its last end, ns"),
    _f("busy_ns", pa.int64(), "union of all its activity intervals, ns"),
    _f("u1_ns", pa.int64(), "union of its activity of kernel_type computation, ns"),
    _f("u2_ns", pa.int64(), "union of its activity of kernel_type communication, ns"),
    _f("u3_ns", pa.int64(), "union of its activity of kernel_type computation or communication, ns"),
    _f("u4_ns", pa.int64(), "union of its activity of kernel_type memory (any other than those two), ns"),
    _f("u5_ns", pa.int64(), "union of its activity of kernel_type computation or memory, ns"),
    _f("u6_ns", pa.int64(), "union of its activity of kernel_type communication or memory, ns"),
    _f("u7_ns", pa.int64(), "union of its activity with a kernel_type, ns"),
    _f("compute_ns", pa.int64(), "union of its computation kernels (kind kernel), ns"),
    _f("comm_ns", pa.int64(), "union of its communication kernels (kind kernel), ns"),
    _f("compute_comm_ns", pa.int64(), "union of its computation and communication kernels, ns"),
    _f("comm_kernels", pa.int64(), "communication kernels it ran"),
])

# Per run, rank and step; read from `nodes` as well as `kernels`. A row spans the run's
# devices, so its partition `device` is the constant STEP_TIMES_DEVICE ('all').
STEP_TIMES_DEVICE = "all"
ROLLUP_STEP_TIMES = pa.schema([
    _COMMON[0],
    _f("device", pa.string(), f"always '{STEP_TIMES_DEVICE}' (the partition key): a step's figures span every device of the run"),
    _COMMON[3], _COMMON[4],
    _f("start_ns", pa.int64(), "the step's first host op or GPU activity start, ns"),
    _f("end_ns", pa.int64(), "the step's last host op or GPU activity end, ns"),
    _f("wall_ns", pa.int64(), "end_ns - start_ns"),
    _f("host_start_ns", pa.int64(), "the step marker's start (steps), else the step's first host op start, ns"),
    _f("host_step_ns", pa.int64(), "the step marker's span (steps: ProfilerStep#N, StepTraceAnnotation), else first host op start to last host op end, ns"),
    _f("device_start_ns", pa.int64(), "the step's first GPU activity start, ns"),
    _f("device_step_ns", pa.int64(), "to the next step's first GPU activity (the last step: to its last end), ns"),
    _f("device_busy_ns", pa.int64(), "union of the step's GPU activity intervals over streams and devices, ns"),
    _f("gpu_kernel_ns", pa.int64(), "summed kernel (kind kernel) duration, ns"),
    _f("gpu_kernel_pct", pa.float64(), "100 * gpu_kernel_ns / wall_ns, 2 decimals"),
    _f("nodes", pa.int64(), "timed host ops"),
    _f("kernels", pa.int64(), "kernels (kind kernel)"),
])

# Per run, device, kernel name and launch configuration (kernels only).
ROLLUP_KERNEL_LAUNCH_CONFIG = pa.schema([
    _COMMON[0], _COMMON[1],
    _f("name", pa.string(), "kernel name"),
    _f("grid", _SHAPE, "grid dimensions"),
    _f("block", _SHAPE, "block dimensions"),
    _f("registers_per_thread", pa.int64(), "registers per thread"),
    _f("shared_memory_bytes", pa.int64(), "shared memory, bytes"),
    _f("avg_occupancy_pct", pa.float64(), "mean estimated occupancy of the instances that record one, %, 2 decimals"),
    _f("instances", pa.int64(), "kernels with this name and configuration on the device"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    # integer tenths (times are integer ns): `kernel_launch_config` divides by 10, exactly
    # the double its raw text gives (a decimal with one digit, cast to the nearest double)
    _f("avg_tenths", pa.int64(), "their mean duration in tenths of a ns, rounded (avg_ns * 10)"),
])

# Per launch (a runtime call joined with the activity it launched): every row is one run's,
# and `kernel_launch_stats` only filters, flags and orders them.
ROLLUP_KERNEL_LAUNCHES = pa.schema([
    _COMMON[0], _COMMON[1], _COMMON[3], _COMMON[4],
    _f("correlation_id", pa.int64(), "correlation id of the call and the activity"),
    _f("launch_call", pa.string(), "the launch call's API name"),
    _f("kernel", pa.string(), "the activity's name"),
    _f("activity_kind", pa.string(), "the activity's kind: kernel | memcpy | memset"),
    _f("cpu_duration_ns", pa.int64(), "the launch call's duration on the host, ns"),
    _f("kernel_start_ns", pa.int64(), "the activity's start, ns"),
    _f("gpu_duration_ns", pa.int64(), "the activity's duration on the GPU, ns"),
    _f("launch_delay_ns", pa.int64(), "activity start - end of its launch call, 0 when negative, ns"),
])

# Per-run summaries of the fleet-wide canned queries that aggregated raw rows (issue 22):
# each holds a metric's rows for whole runs, the grain of the query's own groups, so the
# query reads a few rows a run instead of every kernel or op (0015). `activity_kind`: the
# activity's own kind (kernel | memcpy | memset; the query filters on it), not the
# writer's `kind` column that the interval rollups partition by.
_ACTIVITY_KIND = _f("activity_kind", pa.string(), "the activities' kind: kernel | memcpy | memset")
_ALL_DEVICES = _f("device", pa.string(), f"always '{STEP_TIMES_DEVICE}' (the partition key): the row spans every device of the run")

# Per run, device, kind and name: what `kernel_summary` groups (metrics/kernel_names.sql).
ROLLUP_KERNEL_NAMES = pa.schema([
    _COMMON[0], _COMMON[1], _ACTIVITY_KIND,
    _f("name", pa.string(), "kernel (or copy, set) name"),
    _f("instances", pa.int64(), "activities of this kind and name on the device"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("avg_duration", pa.float64(), "their mean duration, ns, 1 decimal"),
    _f("min_ns", pa.int64(), "shortest, ns"),
    _f("max_ns", pa.int64(), "longest, ns"),
])

# Per run, device, kind and power-of-two duration bucket: `kernel_duration_histogram`'s counts.
ROLLUP_KERNEL_HISTOGRAM = pa.schema([
    _COMMON[0], _COMMON[1], _ACTIVITY_KIND,
    _f("bucket_lo_ns", pa.int64(), "bucket [bucket_lo_ns, 2 * bucket_lo_ns) (0: durations below 1 ns), ns"),
    _f("instances", pa.int64(), "activities with a duration in the bucket"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
])

# Per run, device, op name and op type: what `top_ops` groups (metrics/op_summary.sql).
ROLLUP_OP_SUMMARY = pa.schema([
    _COMMON[0], _COMMON[1],
    _f("node_name", pa.string(), "framework op / graph node name"),
    _f("op_type", pa.string(), "op type"),
    _f("executions", pa.int64(), "timed executions"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("avg_duration", pa.float64(), "their mean duration, ns, 1 decimal"),
    _f("min_ns", pa.int64(), "shortest, ns"),
    _f("max_ns", pa.int64(), "longest, ns"),
])

# What `nccl_bandwidth` reports for the whole run (its rows are each one run's).
ROLLUP_NCCL_BANDWIDTH = pa.schema([
    _COMMON[0], _ALL_DEVICES, _COMMON[3],
    _f("collective", pa.string(), "the collective, lower case, as the kernel's args name it"),
    _f("dtype", pa.string(), "element type, as the args name it"),
    _f("message_bytes", pa.int64(), "max(In, Out msg nelems) x the dtype's size, bytes"),
    _f("group_size", pa.int64(), "ranks in the collective's group"),
    _f("kernels", pa.int64(), "NCCL kernels of this collective, dtype, size and group"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("algbw_gbps", pa.float64(), "message bytes / kernel time, GB/s, 3 decimals"),
    _f("busbw_gbps", pa.float64(), "algbw x the collective's bus factor (nccl-tests), GB/s, 3 decimals"),
])

# What `memcpy_summary` reports for the whole run (its rows are each one run's).
ROLLUP_MEMCPY_SUMMARY = pa.schema([
    _COMMON[0], _COMMON[1], _ACTIVITY_KIND,
    _f("copy_kind", pa.string(), "HtoD | DtoH | DtoD | HtoH | PtoP, for copies"),
    _f("operations", pa.int64(), "copies (or sets)"),
    _f("total_bytes", pa.int64(), "bytes they moved or set"),
    _f("total_ns", pa.int64(), "their summed duration, ns"),
    _f("avg_size", pa.float64(), "their mean bytes, 1 decimal"),
    _f("min_bytes", pa.int64(), "fewest bytes"),
    _f("max_bytes", pa.int64(), "most bytes"),
    _f("gb_per_s", pa.float64(), "bytes / time of the rows that know their bytes, GB/s, 3 decimals"),
])

# A row per run: what `fleet_trend` reports of each run before comparing runs.
ROLLUP_RUN_SUMMARY = pa.schema([
    _COMMON[0], _ALL_DEVICES,
    _f("nodes", pa.int64(), "host op / graph node rows (NULL: none)"),
    _f("kernels", pa.int64(), "kernels (kind kernel; NULL: no GPU activity)"),
    _f("gpu_kernel_ns", pa.int64(), "summed kernel duration, ns"),
    _f("steps", pa.int64(), "distinct step numbers"),
    _f("mean_step", pa.float64(), "mean wall span of a step's ops and GPU activity over every rank's steps, ns, 1 decimal"),
    _f("mean_host_step", pa.float64(), "mean host step time (as step_times defines it), ns, 1 decimal"),
    _f("mean_device_step", pa.float64(), "mean device step time (as step_times defines it), ns, 1 decimal"),
])

# Per run, rank, step and precision: the FLOPs `mfu` divides (metrics/step_flops.sql).
ROLLUP_STEP_FLOPS = pa.schema([
    _COMMON[0], _ALL_DEVICES, _COMMON[3], _COMMON[4],
    _f("dtype", pa.string(), "the ops' precision (fp32 where unknown)"),
    _f("flops", pa.int64(), "FLOPs of the step's ops at that precision, each op counted once"),
])

# Tables the readers fill, in the order readers and docs list them.
SOURCE_TABLES: dict[str, pa.Schema] = {
    "nodes": NODES,
    "kernels": KERNELS,
    "tensors": TENSORS,
    "allocations": ALLOCATIONS,
    "runtime_calls": RUNTIME_CALLS,
    "annotations": ANNOTATIONS,
    "steps": STEPS,
    "events": EVENTS,
}
# Tables the ingest computes from the readers' rows (tracedb.rollups): `rollup_<metric>`.
ROLLUP_TABLES: dict[str, pa.Schema] = {
    "rollup_gpu_busy_idle": ROLLUP_GPU_BUSY_IDLE,
    "rollup_stream_overlap": ROLLUP_STREAM_OVERLAP,
    "rollup_collectives": ROLLUP_COLLECTIVES,
    "rollup_stream_time": ROLLUP_STREAM_TIME,
    "rollup_memory_bandwidth": ROLLUP_MEMORY_BANDWIDTH,
    "rollup_device_time": ROLLUP_DEVICE_TIME,
    "rollup_step_times": ROLLUP_STEP_TIMES,
    "rollup_kernel_launch_config": ROLLUP_KERNEL_LAUNCH_CONFIG,
    "rollup_kernel_launches": ROLLUP_KERNEL_LAUNCHES,
    "rollup_kernel_names": ROLLUP_KERNEL_NAMES,
    "rollup_kernel_histogram": ROLLUP_KERNEL_HISTOGRAM,
    "rollup_op_summary": ROLLUP_OP_SUMMARY,
    "rollup_nccl_bandwidth": ROLLUP_NCCL_BANDWIDTH,
    "rollup_memcpy_summary": ROLLUP_MEMCPY_SUMMARY,
    "rollup_run_summary": ROLLUP_RUN_SUMMARY,
    "rollup_step_flops": ROLLUP_STEP_FLOPS,
}
# Rollup table -> the metric (sql/metrics/<metric>.sql; the canned query of that name, if any, reads it).
ROLLUPS: dict[str, str] = {table: table.removeprefix("rollup_") for table in ROLLUP_TABLES}
# Parquet-backed (partitioned) tables: the readers' and the rollups.
TABLES: dict[str, pa.Schema] = {**SOURCE_TABLES, **ROLLUP_TABLES}

# The tables of schema version 1, which every format fills; the others (runtime_calls,
# annotations, steps, events) are Kineto's so far.
CORE_TABLES = ("nodes", "kernels", "tensors", "allocations")

RUNS = pa.schema(
    [
        _f("run_id", pa.string(), "run id (folder name, file stem, or --run-id)"),
        _f("ingested_at", pa.timestamp("us", tz="UTC"), "when the run was last ingested"),
        _f("status", pa.string(), "complete (every source file read) | partial (ingested with --partial: some files failed)"),
        _f("source_files", _STRS, "trace files of the run"),
        _f("formats", _STRS, "formats found in the run"),
        _f("model", pa.string(), "label from run.json"),
        _f("commit", pa.string(), "label from run.json"),
        _f("hardware", pa.string(), "label from run.json"),
        _f("started_at", pa.timestamp("us", tz="UTC"), "label from run.json"),
        _f("labels", pa.string(), "every run.json label, as JSON"),
        _f("metadata", pa.string(), "source metadata (device properties, distributed info), as JSON"),
    ]
)

# `files` (each run's source files as last ingested) and `ingest_log` (every attempt).
FILES = pa.schema(
    [
        _f("run_id", pa.string(), "run the source file belongs to"),
        _f("path", pa.string(), "source file, relative to the run folder"),
        _f("size_bytes", pa.int64(), "size of the source file, bytes"),
        _f("sha256", pa.string(), "SHA-256 of the source file"),
        _f("format", pa.string(), "reader that claimed it (NULL when none did)"),
    ]
    + [_f(f"rows_{t}", pa.int64(), f"rows it gave to `{t}` (NULL on error)") for t in SOURCE_TABLES]
    + [
        _f("status", pa.string(), "ok | error | skipped (no reader claims it: a README, a log; not read)"),
        _f("error", pa.string(), "one-line error, when status = error; why it was skipped, when skipped"),
        _f("seconds", pa.float64(), "time spent reading it"),
        _f("ingest_id", pa.string(), "ingest that read it"),
        _f("ingested_at", pa.timestamp("us", tz="UTC"), "when it was read"),
        _f("metadata", pa.string(), "source metadata (device properties, distributed info), as JSON"),
        _f("warnings", pa.string(), "counts of odd values the reader kept or dropped, as JSON"),
    ]
)

# What each data file held when it was written, for `tracedb check` (Delta's log keeps
# the size but no content hash).
CHECKSUMS = pa.schema(
    [
        _f("table_name", pa.string(), "data table of the file"),
        _f("run_id", pa.string(), "run of the file"),
        _f("path", pa.string(), "file, relative to the warehouse"),
        _f("size_bytes", pa.int64(), "size when written, bytes"),
        _f("sha256", pa.string(), "SHA-256 of the file when written"),
        _f("ingest_id", pa.string(), "ingest (or optimize) that wrote it"),
    ]
)

# The regression report's accepted changes (`tracedb accept` / `tracedb revoke`), append-only:
# a revoke is a row of its own naming the acceptance it withdraws, so the table is also the
# history of who accepted what. No ingest_id: a row belongs to no ingest.
ACCEPTANCES = pa.schema(
    [
        _f("acceptance_id", pa.string(), "id of the acceptance (a revoke row repeats the id it withdraws)"),
        _f("action", pa.string(), "accept | revoke"),
        _f("run_id", pa.string(), "first run of the accepted change: the report's baseline starts at this run"),
        _f("metrics", _STRS, "metric keys, kinds or glob patterns accepted (empty: every metric)"),
        _f("note", pa.string(), "why (required)"),
        _f("accepted_by", pa.string(), "who accepted or revoked it (the login name, or --by)"),
        _f("accepted_at", pa.timestamp("us", tz="UTC"), "when it was accepted or revoked"),
    ]
)

# Metadata tables: Delta tables too, unpartitioned.
META_TABLES: dict[str, pa.Schema] = {"runs": RUNS, "files": FILES, "ingest_log": FILES, "checksums": CHECKSUMS,
                                     "acceptances": ACCEPTANCES}
# Metadata tables whose rows belong to no ingest (the lake adds no ingest_id column).
NO_INGEST_ID = ("acceptances",)
# Every Delta table of the lake.
ALL_TABLES: dict[str, pa.Schema] = {**TABLES, **META_TABLES}
TABLE_DOCS: dict[str, str] = {
    "nodes": "execution of a framework op, or a graph node listed without timing",
    "kernels": "GPU stream activity: kernel, memcpy, memset, with the op that launched it",
    "tensors": "output tensor of a node: dtype, shape, bytes, allocator; from an execution trace, each value of a tensor with the node that wrote it and the nodes that read it",
    "allocations": "allocation / free event, or planned memory chunk",
    "runtime_calls": "CUDA/HIP runtime and driver call: duration, thread, correlation, the kernel it launched",
    "annotations": "user annotation range (record_function) on the host, or its GPU-side range",
    "steps": "profiler step: host span (ProfilerStep#N) and the device span of the step's GPU work",
    "events": "other profiler events: syncs, instants, flows and categories tracedb has no table for, with args",
    "rollup_gpu_busy_idle": "rollup, per run, rank, device, step window and kind: what `gpu_busy_idle` reports, computed at ingest",
    "rollup_stream_overlap": "rollup, per run, device and kind: what `stream_overlap` reports for the whole run, computed at ingest",
    "rollup_collectives": "rollup, per run, device and collective name: what `collectives` reports for the whole run without `name_like`, computed at ingest",
    "rollup_stream_time": "rollup, per run, rank, device, source file and stream: the idle gaps per category and the queue length summary that `idle_time_breakdown` and `queue_length` report, computed at ingest",
    "rollup_memory_bandwidth": "rollup, per run, rank, device and copy type: what `memory_bandwidth` reports for the whole run, computed at ingest",
    "rollup_device_time": "rollup, per run, rank and device: the interval unions (busy, per kernel type set, computation and communication kernels) that `kernel_type_breakdown`, `temporal_breakdown` and `comm_comp_overlap` report from for the whole run, computed at ingest",
    "rollup_step_times": "rollup, per run, rank and step: what `step_times` reports, computed at ingest from `nodes` and `kernels`",
    "rollup_kernel_launch_config": "rollup, per run, device, kernel name and launch configuration: what `kernel_launch_config` reports, computed at ingest",
    "rollup_kernel_launches": "rollup, per launch: each runtime call joined with the activity it launched, the rows `kernel_launch_stats` reports, computed at ingest",
    "rollup_kernel_names": "rollup, per run, device, activity kind and name: instances, total, mean, min and max duration, what `kernel_summary` reports from, computed at ingest",
    "rollup_kernel_histogram": "rollup, per run, device, activity kind and power-of-two duration bucket: what `kernel_duration_histogram` counts, computed at ingest",
    "rollup_op_summary": "rollup, per run, device, op name and op type: executions, total, mean, min and max duration, what `top_ops` reports from, computed at ingest",
    "rollup_nccl_bandwidth": "rollup, per run, rank, collective, dtype, message size and group size: what `nccl_bandwidth` reports for the whole run, computed at ingest",
    "rollup_memcpy_summary": "rollup, per run, device, activity kind and copy kind: what `memcpy_summary` reports, computed at ingest",
    "rollup_run_summary": "rollup, a row per run: counts, GPU kernel time and mean step times, what `fleet_trend` compares across runs, computed at ingest",
    "rollup_step_flops": "rollup, per run, rank, step and precision: the ops' FLOPs that `mfu` divides by the step time, computed at ingest",
    "runs": "one row per run: its live ingest, files, formats and run.json labels",
    "files": "every source file of every run as last ingested",
    "ingest_log": "every ingest attempt of every source file (append-only)",
    "checksums": "size and SHA-256 of every data file when written (append-only), for `tracedb check`",
    "acceptances": "changes accepted (and revoked) for the regression report's baseline, append-only (`tracedb accept`)",
}

VIEWS: dict[str, pa.Schema] = {"runs": RUNS, **TABLES, "files": FILES, "ingest_log": FILES}

# Columns the contract promises; tests check each is present.
CONTRACT_COLUMNS: dict[str, list[str]] = {
    "runs": ["run_id", "ingested_at", "source_files", "formats"],
    "nodes": ["run_id", "device", "device_raw", "step", "node_name", "op_type", "start_ns",
              "duration_ns", "thread_id", "source_format"],
    "kernels": ["run_id", "device", "stream", "step", "kind", "name", "node_name", "start_ns",
                "duration_ns", "bytes"],
    "tensors": ["run_id", "device", "node_name", "slot", "dtype", "shape", "requested_bytes",
                "allocated_bytes", "allocator", "allocation_id"],
    "allocations": ["run_id", "device", "allocator", "node_name", "ts_ns", "bytes"],
    "runtime_calls": ["run_id", "device", "category", "name", "start_ns", "duration_ns", "thread_id",
                      "correlation_id", "node_name", "kernel_name"],
    "annotations": ["run_id", "device", "category", "name", "start_ns", "duration_ns"],
    "steps": ["run_id", "device", "step", "start_ns", "duration_ns", "device_start_ns", "device_end_ns"],
    "events": ["run_id", "device", "category", "name", "phase", "start_ns", "duration_ns", "params"],
}


def unit(field: pa.Field) -> str:
    """The unit of a column, from the naming rule (`*_ns` ns, `*bytes` bytes), else ''."""
    if field.name.endswith("_ns"):
        return "ns"
    if field.name.endswith("bytes"):
        return "bytes"
    return {"seconds": "s", "occupancy": "%"}.get(field.name, "")


def duckdb_type(typ: pa.DataType) -> str:
    """DuckDB SQL type for an Arrow type (used for empty views and casts)."""
    if pa.types.is_list(typ):
        return duckdb_type(typ.value_type) + "[]"
    if pa.types.is_timestamp(typ):
        return "TIMESTAMPTZ" if typ.tz else "TIMESTAMP"
    return {
        pa.string(): "VARCHAR",
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }[typ]


def schema_markdown() -> str:
    """docs/schema.md, generated."""
    out = [
        "# tracedb schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated from `tracedb/schema.py` "
        "(`python -m tracedb.docs`); do not edit by hand.",
        "",
        "Times are integer nanoseconds (BIGINT); sizes are integer bytes (BIGINT).",
    ]
    for view, schema in VIEWS.items():
        out += ["", f"## `{view}`", "", "| column | type | meaning |", "|---|---|---|"]
        for field in schema:
            doc = (field.metadata or {}).get(b"doc", b"").decode().replace("|", "\\|")
            out.append(f"| `{field.name}` | {duckdb_type(field.type)} | {doc} |")
    return "\n".join(out) + "\n"

