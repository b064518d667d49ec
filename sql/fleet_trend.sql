-- title: Fleet trend
-- description: One row per run in run order (runs.started_at, then ingested_at): total GPU kernel time, kernel and node counts, steps (distinct step numbers), mean step time (wall span of a step's ops and GPU activity), mean host and device step time (defined as in step_times; the means are over every rank's steps, each rank's steps apart), with the change from the previous run (XProf / HTA across-run trends).
-- param: model VARCHAR NULL Only runs with this model label (NULL: every run)
-- The metric sql/metrics/run_summary.sql (a row per run), read from its per-run rollup.
WITH s AS (
-- include: metrics/run_summary.sql
),
t AS (
    SELECT
        r.run_id,
        r.started_at,
        r.ingested_at,
        r.model,
        r.hardware,
        coalesce(s.nodes, 0) AS nodes,
        coalesce(s.kernels, 0) AS kernels,
        s.gpu_kernel_ns,
        coalesce(s.steps, 0) AS steps,
        s.mean_step AS mean_step_ns,
        s.mean_host_step AS mean_host_step_ns,
        s.mean_device_step AS mean_device_step_ns
    FROM runs r
    LEFT JOIN s ON s.run_id = r.run_id
    WHERE ($model IS NULL OR r.model = $model)
)
SELECT
    run_id,
    started_at,
    ingested_at,
    model,
    hardware,
    nodes,
    kernels,
    gpu_kernel_ns,
    steps,
    mean_step_ns,
    mean_host_step_ns,
    mean_device_step_ns,
    round(100.0 * (gpu_kernel_ns - lag(gpu_kernel_ns) OVER w) / nullif(lag(gpu_kernel_ns) OVER w, 0), 2) AS gpu_kernel_change_pct,
    round(100.0 * (mean_step_ns - lag(mean_step_ns) OVER w) / nullif(lag(mean_step_ns) OVER w, 0), 2) AS step_change_pct,
    round(100.0 * (mean_device_step_ns - lag(mean_device_step_ns) OVER w) / nullif(lag(mean_device_step_ns) OVER w, 0), 2) AS device_step_change_pct
FROM t
WINDOW w AS (ORDER BY started_at NULLS LAST, ingested_at, run_id)
ORDER BY started_at NULLS LAST, ingested_at, run_id
