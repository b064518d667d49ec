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
sets AS (  -- every activity in set 'all'; computation kernels also in set 'compute'
    SELECT run_id, rank, device, 'all' AS set_name, s, e FROM k
    UNION ALL
    SELECT run_id, rank, device, 'compute', s, e FROM k WHERE compute
),
marked AS (
    SELECT *, CASE WHEN s > max(e) OVER (PARTITION BY run_id, rank, device, set_name ORDER BY s, e
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                   THEN 1 ELSE 0 END AS opens
    FROM sets
),
numbered AS (
    SELECT *, sum(opens) OVER (PARTITION BY run_id, rank, device, set_name ORDER BY s, e
                               ROWS UNBOUNDED PRECEDING) AS island
    FROM marked
),
islands AS (
    SELECT run_id, rank, device, set_name, min(s) AS s, max(e) AS e
    FROM numbered GROUP BY run_id, rank, device, set_name, island
),
totals AS (
    SELECT run_id, rank, device,
           max(e) FILTER (set_name = 'all') - min(s) FILTER (set_name = 'all') AS span_ns,
           coalesce(sum(e - s) FILTER (set_name = 'all'), 0) AS busy_ns,
           coalesce(sum(e - s) FILTER (set_name = 'compute'), 0) AS compute_ns
    FROM islands GROUP BY run_id, rank, device
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
