-- title: Fleet trend
-- description: One row per run in run order (runs.started_at, then ingested_at): total GPU kernel time, kernel and node counts, steps (distinct step numbers), mean step time (wall span of a step's ops and GPU activity), mean host and device step time (defined as in step_times; the means are over every rank's steps, each rank's steps apart), with the change from the previous run (XProf / HTA across-run trends).
-- param: model VARCHAR NULL Only runs with this model label (NULL: every run)
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
t AS (
    SELECT
        r.run_id,
        r.started_at,
        r.ingested_at,
        r.model,
        r.hardware,
        coalesce(n.nodes, 0) AS nodes,
        coalesce(k.kernels, 0) AS kernels,
        k.gpu_kernel_ns,
        coalesce(s.steps, 0) AS steps,
        round(s.mean_step_ns, 1) AS mean_step_ns,
        round(s.mean_host_step_ns, 1) AS mean_host_step_ns,
        round(s.mean_device_step_ns, 1) AS mean_device_step_ns
    FROM runs r
    LEFT JOIN k ON k.run_id = r.run_id
    LEFT JOIN n ON n.run_id = r.run_id
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
