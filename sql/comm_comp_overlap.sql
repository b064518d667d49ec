-- title: Communication-computation overlap
-- description: Per run, rank and device: time the GPU spends in communication kernels (interval union), how much of it overlaps computation kernels (union of both), and that share in percent, as Holistic Trace Analysis' get_comm_comp_overlap (kernel_type from the name rules in tracedb/kernel_types.py; copies and sets count as neither).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity of steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: step_from step_to
-- Fleet-wide, the unions would order every kernel row (1.26 s at 10.4 M kernel rows, 1,000
-- runs): whole runs read the per-run rollup `rollup_device_time` instead, computed at
-- ingest from each run's own rows with the one definition of these unions,
-- sql/metrics/device_time.sql (tracedb.rollups); a step range computes them from the raw
-- rows with that same definition, included below, over the activity of the devices that
-- ran a communication kernel in the range only (the CTE `kernels` shadows the view for the
-- metric): the other devices have no row, and the metric keeps each device apart, so their
-- rows need not be ordered (fleet-wide at 10.4 M rows, load ~2.5, rows identical: step_from
-- 1 5.8 s sorting every device's activity, 1.4 s these; step_to 5 5.3 s, 0.84 s).
WITH kernels AS (
    SELECT k.* FROM kernels k
    WHERE EXISTS (SELECT 1 FROM kernels c
                  WHERE c.kind = 'kernel' AND c.kernel_type = 'communication'
                    AND c.start_ns IS NOT NULL AND c.duration_ns IS NOT NULL
                    AND ($run_id IS NULL OR c.run_id = $run_id)
                    AND ($step_from IS NULL OR c.step >= $step_from)
                    AND ($step_to IS NULL OR c.step <= $step_to)
                    AND c.run_id = k.run_id AND c.rank IS NOT DISTINCT FROM k.rank AND c.device = k.device)
),
raw AS (
-- include: metrics/device_time.sql
),
totals AS (
    -- the unions of the communication kernels, the computation kernels and both; only
    -- devices that ran a communication kernel have a row. The overlap of the first two is
    -- |comm| + |comp| - |comm or comp|.
    SELECT run_id, rank, device, comm_ns, compute_ns AS comp_ns, compute_comm_ns AS both_ns
    FROM rollup_device_time
    WHERE $step_from IS NULL AND $step_to IS NULL AND ($run_id IS NULL OR run_id = $run_id)
      AND comm_kernels > 0
    UNION ALL
    SELECT run_id, rank, device, comm_ns, compute_ns, compute_comm_ns
    FROM raw
    WHERE ($step_from IS NOT NULL OR $step_to IS NOT NULL) AND comm_kernels > 0
)
SELECT run_id, rank, device,
       CAST(comm_ns AS BIGINT) AS comm_ns,
       CAST(comm_ns + comp_ns - both_ns AS BIGINT) AS overlap_ns,
       round(100.0 * (comm_ns + comp_ns - both_ns) / comm_ns, 2) AS overlap_pct
FROM totals
ORDER BY run_id, rank, device
