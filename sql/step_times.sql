-- title: Step times
-- description: Per run, rank and step (rank NULL: a single-trace run without rank information; each rank's steps stay apart): host step time (the step marker's span where the trace marks steps: ProfilerStep#N, StepTraceAnnotation; else first to last host op of the step), device step time (the step's first GPU activity to the next step's first GPU activity; the last step: its first to last GPU activity) with the GPU busy time in the step (union over streams and devices), GPU kernel time and share, counts, and wall_ns (first op or GPU activity to the last one ends; grows with the launch queue in an asynchronous run); step NULL is what lies outside any step (HTA / XProf step time).
-- scope: run_id
-- Every row is one run's (it has no parameter besides run_id): the metric
-- sql/metrics/step_times.sql, always read from its per-run rollup.
WITH per_step AS (
-- include: metrics/step_times.sql
)
SELECT run_id, rank, step, start_ns, end_ns, wall_ns, host_start_ns, host_step_ns,
       device_start_ns, device_step_ns, device_busy_ns, gpu_kernel_ns, gpu_kernel_pct, nodes, kernels
FROM per_step
ORDER BY run_id, rank NULLS LAST, step NULLS LAST
