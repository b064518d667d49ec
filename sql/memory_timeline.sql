-- title: Memory timeline
-- description: Live bytes over time per run, device and allocator, replaying allocation and free events: one row per timestamp, or per bucket of bucket_ns from the allocator's first event, with the net change, the most and the last live bytes in it (PyTorch memory timeline, XProf memory profile).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: allocator VARCHAR NULL Only this allocator (NULL: every allocator)
-- param: bucket_ns BIGINT>0 NULL Bucket width in ns (NULL: one row per event timestamp)
-- param: step_from BIGINT NULL Only events of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only events of steps <= this (NULL: to the last)
-- scope: run_id
WITH ev AS (
    SELECT run_id, device, allocator, ts_ns, count(*) AS events, sum(bytes) AS delta_bytes
    FROM allocations
    WHERE ts_ns IS NOT NULL AND bytes IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
      AND ($allocator IS NULL OR allocator = $allocator)
    GROUP BY run_id, device, allocator, ts_ns
),
live AS (
    SELECT *,
           sum(delta_bytes) OVER (PARTITION BY run_id, device, allocator ORDER BY ts_ns
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS live_bytes,
           min(ts_ns) OVER (PARTITION BY run_id, device, allocator) AS first_ns
    FROM ev
),
b AS (
    SELECT *,
           CASE WHEN $bucket_ns IS NULL THEN ts_ns
                ELSE first_ns + CAST(floor((ts_ns - first_ns) / $bucket_ns) AS BIGINT) * $bucket_ns
           END AS bucket_start_ns
    FROM live
)
SELECT
    run_id,
    device,
    allocator,
    bucket_start_ns AS ts_ns,
    bucket_start_ns - first_ns AS offset_ns,
    CAST(sum(events) AS BIGINT) AS events,
    CAST(sum(delta_bytes) AS BIGINT) AS delta_bytes,
    CAST(max(live_bytes) AS BIGINT) AS max_live_bytes,
    CAST(max_by(live_bytes, ts_ns) AS BIGINT) AS live_bytes
FROM b
GROUP BY run_id, device, allocator, first_ns, bucket_start_ns
ORDER BY run_id, device, allocator, ts_ns
