-- title: Temporal breakdown
-- description: Per run, rank and device: the GPU's time from its first activity to its last, split into idle (no activity), compute (computation kernels) and non-compute (only communication, copies, sets), in ns and percent, as Holistic Trace Analysis' get_temporal_breakdown. Activity is selected by the step that launched it; HTA leaves out each rank's last step by default, which step_to reproduces. Unlike HTA, cuda_sync events are not GPU activity (they are in `events`) and times keep their nanoseconds.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
WITH k AS (
    SELECT run_id, rank, device, kind = 'kernel' AND kernel_type = 'computation' AS compute,
           start_ns AS s, start_ns + duration_ns AS e
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
swept AS (  -- the latest end among the device's earlier activities, and among its earlier computation kernels
    SELECT *,
           coalesce(max(e) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p_all,
           coalesce(max(CASE WHEN compute THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p_compute
    FROM k
),
totals AS (  -- a union's length: what each activity adds past every earlier end
    SELECT run_id, rank, device,
           max(e) - min(s) AS span_ns,
           sum(greatest(0, e - greatest(s, p_all))) AS busy_ns,
           coalesce(sum(CASE WHEN compute THEN greatest(0, e - greatest(s, p_compute)) END), 0) AS compute_ns
    FROM swept GROUP BY run_id, rank, device
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
