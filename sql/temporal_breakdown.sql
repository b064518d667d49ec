-- title: Temporal breakdown
-- description: Per run, rank and device: the GPU's time from its first activity to its last, split into idle (no activity), compute (computation kernels) and non-compute (only communication, copies, sets), in ns and percent, as Holistic Trace Analysis' get_temporal_breakdown. Activity is selected by the step that launched it; HTA leaves out each rank's last step by default, which step_to reproduces. Unlike HTA, cuda_sync events are not GPU activity (they are in `events`) and times keep their nanoseconds.
-- scope: run_id
-- The span and the busy and compute unions are the metric sql/metrics/device_time.sql:
-- whole runs read its per-run rollup, a step range computes them from raw rows.
WITH device_time AS (
-- include: metrics/device_time.sql
),
totals AS (  -- span, the union of all activity (busy), the union of computation kernels
    SELECT run_id, rank, device, span_ns, busy_ns, compute_ns
    FROM device_time
)
SELECT run_id, rank, device,
       CAST(span_ns AS BIGINT) AS span_ns,
       CAST(span_ns - busy_ns AS BIGINT) AS idle_ns,
       CAST(compute_ns AS BIGINT) AS compute_ns,
       CAST(busy_ns - compute_ns AS BIGINT) AS non_compute_ns,
       round(100.0 * (span_ns - busy_ns) / nullif(span_ns, 0), 2) AS idle_pct,
       round(100.0 * compute_ns / nullif(span_ns, 0), 2) AS compute_pct,
       round(100.0 * (busy_ns - compute_ns) / nullif(span_ns, 0), 2) AS non_compute_pct
FROM totals
ORDER BY run_id, rank, device
