-- title: GPU busy and idle time
-- description: Per run, device and step: busy time (the union of GPU activity intervals across all streams, so concurrent kernels count once), the span from first start to last end, idle = span - busy, the busy share, and the device step time (the step's first activity to the next step's first activity on that device; the last step: its span) (HTA temporal breakdown / XProf GPU idle time).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
WITH k AS (
    SELECT run_id, device, step, start_ns, start_ns + duration_ns AS end_ns, duration_ns
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($kind IS NULL OR kind = $kind)
),
prev AS (
    -- Latest end among the intervals that start earlier: a start after it opens a new busy island.
    SELECT *,
           max(end_ns) OVER (PARTITION BY run_id, device, step ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM k
),
numbered AS (
    SELECT *,
           sum(CASE WHEN prev_end_ns IS NULL OR start_ns > prev_end_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, device, step ORDER BY start_ns, end_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM prev
),
islands AS (
    SELECT run_id, device, step, island,
           min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           count(*) AS activities, sum(duration_ns) AS activity_ns
    FROM numbered
    GROUP BY run_id, device, step, island
),
per_step AS (
SELECT
    run_id,
    device,
    step,
    CAST(sum(activities) AS BIGINT) AS activities,
    CAST(sum(activity_ns) AS BIGINT) AS activity_ns,
    min(start_ns) AS start_ns,
    max(end_ns) AS end_ns,
    max(end_ns) - min(start_ns) AS span_ns,
    CAST(sum(end_ns - start_ns) AS BIGINT) AS busy_ns,
    CAST(max(end_ns) - min(start_ns) - sum(end_ns - start_ns) AS BIGINT) AS idle_ns,
    round(100.0 * sum(end_ns - start_ns) / nullif(max(end_ns) - min(start_ns), 0), 2) AS busy_pct,
    count(*) AS busy_intervals
FROM islands
GROUP BY run_id, device, step
),
nxt AS (
    -- the next step's first activity on the device (step NULL is no step: left out here)
    SELECT run_id, device, step,
           lead(start_ns) OVER (PARTITION BY run_id, device ORDER BY step) AS next_start_ns
    FROM per_step
    WHERE step IS NOT NULL
)
SELECT
    p.*,
    CASE WHEN p.step IS NOT NULL THEN coalesce(n.next_start_ns, p.end_ns) - p.start_ns END AS device_step_ns
FROM per_step p
LEFT JOIN nxt n ON n.run_id = p.run_id AND n.device = p.device AND n.step = p.step
ORDER BY p.run_id, p.device, p.step NULLS LAST
