-- title: GPU busy and idle time
-- description: Per run, device and step: busy time (the union of GPU activity intervals across all streams, so concurrent kernels count once), the span from first start to last end, idle = span - busy, and the busy share (HTA temporal breakdown / XProf GPU idle time).
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
)
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
ORDER BY run_id, device, step NULLS LAST
