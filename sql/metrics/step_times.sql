-- title: Step times
-- description: Per run, rank and step (rank NULL: a single-trace run without rank information; each rank's steps stay apart): host step time (the step marker's span where the trace marks steps: ProfilerStep#N, StepTraceAnnotation; else first to last host op of the step), device step time (the step's first GPU activity to the next step's first GPU activity; the last step: its first to last GPU activity) with the GPU busy time in the step (union over streams and devices), GPU kernel time and share, counts, and wall_ns (first op or GPU activity to the last one ends; grows with the launch queue in an asynchronous run); step NULL is what lies outside any step (HTA / XProf step time).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- rollup: rollup_step_times
-- columns: run_id rank step start_ns end_ns wall_ns host_start_ns host_step_ns device_start_ns device_step_ns device_busy_ns gpu_kernel_ns gpu_kernel_pct nodes kernels
-- rollup-filter: run_id
-- reads: nodes kernels steps
-- needs: nodes|kernels
WITH spans AS NOT MATERIALIZED (  -- read twice (per_step, busy): scanned twice, not held (half the peak memory)
    SELECT run_id, rank, step, start_ns, start_ns + duration_ns AS end_ns,
           0 AS kernel_ns, 1 AS is_node, 0 AS is_kernel
    FROM nodes
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
    UNION ALL
    SELECT run_id, rank, step, start_ns, start_ns + duration_ns AS end_ns,
           CASE WHEN kind = 'kernel' THEN duration_ns ELSE 0 END AS kernel_ns,
           0 AS is_node,
           CASE WHEN kind = 'kernel' THEN 1 ELSE 0 END AS is_kernel
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
),
busy AS (
    -- GPU busy time of the step: the union of its GPU intervals, as what each interval adds
    -- past the latest end among those that start earlier (one window, no numbered islands)
    SELECT run_id, rank, step,
           CAST(sum(greatest(0, end_ns - greatest(start_ns, coalesce(prev_end_ns, start_ns)))) AS BIGINT)
               AS device_busy_ns
    FROM (SELECT run_id, rank, step, start_ns, end_ns,
                 max(end_ns) OVER (PARTITION BY run_id, rank, step ORDER BY start_ns
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
          FROM spans WHERE is_node = 0) AS g
    GROUP BY run_id, rank, step
),
per_step AS (
    SELECT
        run_id,
        rank,
        step,
        min(start_ns) AS start_ns,
        max(end_ns) AS end_ns,
        min(start_ns) FILTER (WHERE is_node = 1) AS host_start_ns,
        max(end_ns) FILTER (WHERE is_node = 1) AS host_end_ns,
        min(start_ns) FILTER (WHERE is_node = 0) AS device_start_ns,
        max(end_ns) FILTER (WHERE is_node = 0) AS device_end_ns,
        CAST(sum(kernel_ns) AS BIGINT) AS gpu_kernel_ns,
        CAST(sum(is_node) AS BIGINT) AS nodes,
        CAST(sum(is_kernel) AS BIGINT) AS kernels
    FROM spans
    GROUP BY run_id, rank, step
),
marks AS (
    -- the step markers' spans (steps rows; several of one step, e.g. one a thread: their hull)
    SELECT run_id, rank, step, min(start_ns) AS start_ns, max(start_ns + duration_ns) AS end_ns
    FROM steps
    WHERE step IS NOT NULL AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, rank, step
),
nxt AS (
    -- the next step's first GPU activity (step NULL is no step: it is left out here)
    SELECT run_id, rank, step,
           lead(device_start_ns) OVER (PARTITION BY run_id, rank ORDER BY step) AS next_device_start_ns
    FROM per_step
    WHERE step IS NOT NULL
)
SELECT
    s.run_id,
    s.rank,
    s.step,
    s.start_ns,
    s.end_ns,
    s.end_ns - s.start_ns AS wall_ns,
    coalesce(m.start_ns, s.host_start_ns) AS host_start_ns,
    coalesce(m.end_ns - m.start_ns, s.host_end_ns - s.host_start_ns) AS host_step_ns,
    s.device_start_ns,
    CASE WHEN s.step IS NOT NULL
         THEN coalesce(n.next_device_start_ns, s.device_end_ns) - s.device_start_ns END AS device_step_ns,
    b.device_busy_ns,
    s.gpu_kernel_ns,
    round(100.0 * s.gpu_kernel_ns / nullif(s.end_ns - s.start_ns, 0), 2) AS gpu_kernel_pct,
    s.nodes,
    s.kernels
FROM per_step s
LEFT JOIN busy b ON b.run_id = s.run_id AND b.rank IS NOT DISTINCT FROM s.rank
                AND b.step IS NOT DISTINCT FROM s.step
LEFT JOIN marks m ON m.run_id = s.run_id AND m.rank IS NOT DISTINCT FROM s.rank AND m.step = s.step
LEFT JOIN nxt n ON n.run_id = s.run_id AND n.rank IS NOT DISTINCT FROM s.rank AND n.step = s.step
