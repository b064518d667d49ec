-- title: Temporal breakdown
-- description: Per run, rank and device: the GPU's time from its first activity to its last, split into idle (no activity), compute (computation kernels) and non-compute (only communication, copies, sets), in ns and percent, as Holistic Trace Analysis' get_temporal_breakdown. Activity is selected by the step that launched it; HTA leaves out each rank's last step by default, which step_to reproduces. Unlike HTA, cuda_sync events are not GPU activity (they are in `events`) and times keep their nanoseconds.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: step_from step_to
-- Fleet-wide, the busy and compute unions would order every activity row (6.1 s at 10.4 M
-- kernel rows, 1,000 runs): whole runs read the per-run rollup `rollup_device_time`
-- instead, computed at ingest from each run's own rows with the one definition of these
-- unions, sql/metrics/device_time.sql (tracedb.rollups); a step range computes them from
-- the raw rows with that same definition, included below.
WITH raw AS (
-- include: metrics/device_time.sql
),
totals AS (  -- span, the union of all activity (busy), the union of computation kernels
    SELECT run_id, rank, device, span_ns, busy_ns, compute_ns
    FROM rollup_device_time
    WHERE $step_from IS NULL AND $step_to IS NULL AND ($run_id IS NULL OR run_id = $run_id)
    UNION ALL
    SELECT run_id, rank, device, span_ns, busy_ns, compute_ns
    FROM raw
    WHERE $step_from IS NOT NULL OR $step_to IS NOT NULL
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
