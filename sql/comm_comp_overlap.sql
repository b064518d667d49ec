-- title: Communication-computation overlap
-- description: Per run, rank and device: time the GPU spends in communication kernels (interval union), how much of it overlaps computation kernels (union of both), and that share in percent, as Holistic Trace Analysis' get_comm_comp_overlap (kernel_type from the name rules in tracedb/kernel_types.py; copies and sets count as neither).
-- scope: run_id
-- The unions are the metric sql/metrics/device_time.sql: whole runs read its per-run
-- rollup, a step range computes them from raw rows, over the activity of the devices that
-- ran a communication kernel in the range only (the CTE `kernels` shadows the view for the
-- metric; unused when the rollup is read): the other devices have no row, and the metric
-- keeps each device apart, so their rows need not be ordered (bench/RESULTS.md).
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
unions AS (
-- include: metrics/device_time.sql
),
totals AS (
    -- the unions of the communication kernels, the computation kernels and both; only
    -- devices that ran a communication kernel have a row. The overlap of the first two is
    -- |comm| + |comp| - |comm or comp|.
    SELECT run_id, rank, device, comm_ns, compute_ns AS comp_ns, compute_comm_ns AS both_ns
    FROM unions
    WHERE comm_kernels > 0
)
SELECT run_id, rank, device,
       CAST(comm_ns AS BIGINT) AS comm_ns,
       CAST(comm_ns + comp_ns - both_ns AS BIGINT) AS overlap_ns,
       round(100.0 * (comm_ns + comp_ns - both_ns) / comm_ns, 2) AS overlap_pct
FROM totals
ORDER BY run_id, rank, device
