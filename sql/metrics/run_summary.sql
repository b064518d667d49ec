-- title: Run summary
-- description: Per run with host ops or GPU activity: kernel and node counts, total GPU kernel time, steps (distinct step numbers) and the mean step, host step and device step time (as fleet_trend defines them, 1 decimal); the one definition behind fleet_trend and rollup_run_summary.
-- rollup: rollup_run_summary
-- columns: run_id nodes kernels gpu_kernel_ns steps mean_step mean_host_step mean_device_step
-- reads: nodes kernels steps
-- needs: nodes|kernels
WITH kr AS (
    -- one scan of each table (the old text read each three times): per run, rank and step
    SELECT run_id, rank, step,
           count(CASE WHEN kind = 'kernel' THEN 1 END) AS kernels,
           sum(CASE WHEN kind = 'kernel' THEN duration_ns END) AS kernel_ns,
           min(CASE WHEN duration_ns IS NOT NULL THEN start_ns END) AS start_ns,
           max(start_ns + duration_ns) AS end_ns
    FROM kernels
    GROUP BY run_id, rank, step
),
nr AS (
    SELECT run_id, rank, step, count(*) AS nodes,
           min(CASE WHEN duration_ns IS NOT NULL THEN start_ns END) AS start_ns,
           max(start_ns + duration_ns) AS end_ns
    FROM nodes
    GROUP BY run_id, rank, step
),
k AS (
    SELECT run_id, CAST(sum(kernels) AS BIGINT) AS kernels, CAST(sum(kernel_ns) AS BIGINT) AS gpu_kernel_ns
    FROM kr
    GROUP BY run_id
),
n AS (
    SELECT run_id, CAST(sum(nodes) AS BIGINT) AS nodes FROM nr GROUP BY run_id
),
marks AS (
    -- the step markers' spans (ProfilerStep#N, StepTraceAnnotation), as step_times reads them
    SELECT run_id, rank, step, max(start_ns + duration_ns) - min(start_ns) AS host_ns
    FROM steps
    WHERE step IS NOT NULL AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
    GROUP BY run_id, rank, step
),
host AS (
    -- host step time as step_times defines it: the step marker's span, else the step's
    -- first host op start to its last host op end
    SELECT nr.run_id, nr.rank, nr.step, coalesce(m.host_ns, nr.end_ns - nr.start_ns) AS host_ns
    FROM nr
    LEFT JOIN marks m ON m.run_id = nr.run_id AND m.rank IS NOT DISTINCT FROM nr.rank AND m.step = nr.step
    WHERE nr.step IS NOT NULL AND nr.start_ns IS NOT NULL
),
dev AS (
    SELECT run_id, rank, step, start_ns, end_ns
    FROM kr
    WHERE step IS NOT NULL AND start_ns IS NOT NULL
),
walls AS (
    SELECT run_id, rank, step, max(end_ns) - min(start_ns) AS wall_ns
    FROM (SELECT run_id, rank, step, start_ns, end_ns FROM nr WHERE step IS NOT NULL AND start_ns IS NOT NULL
          UNION ALL
          SELECT run_id, rank, step, start_ns, end_ns FROM dev) AS spans
    GROUP BY run_id, rank, step
),
dev_steps AS (
    -- device step time: first GPU activity to the next step's first one (last step: its span)
    SELECT run_id, rank, step,
           coalesce(lead(start_ns) OVER (PARTITION BY run_id, rank ORDER BY step), end_ns) - start_ns AS device_ns
    FROM dev
),
s AS (
    SELECT st.run_id, count(DISTINCT st.step) AS steps, avg(st.wall_ns) AS mean_step_ns,
           avg(h.host_ns) AS mean_host_step_ns, avg(d.device_ns) AS mean_device_step_ns
    FROM walls st
    LEFT JOIN host h ON h.run_id = st.run_id AND h.rank IS NOT DISTINCT FROM st.rank AND h.step = st.step
    LEFT JOIN dev_steps d ON d.run_id = st.run_id AND d.rank IS NOT DISTINCT FROM st.rank AND d.step = st.step
    GROUP BY st.run_id
),
r AS (
    SELECT run_id FROM k
    UNION
    SELECT run_id FROM n
)
SELECT
    r.run_id,
    n.nodes,
    k.kernels,
    k.gpu_kernel_ns,
    s.steps,
    -- ns, 1 decimal (doubles: not named *_ns, the integer ns columns)
    round(s.mean_step_ns, 1) AS mean_step,
    round(s.mean_host_step_ns, 1) AS mean_host_step,
    round(s.mean_device_step_ns, 1) AS mean_device_step
FROM r
LEFT JOIN k ON k.run_id = r.run_id
LEFT JOIN n ON n.run_id = r.run_id
LEFT JOIN s ON s.run_id = r.run_id
