-- title: Peak memory
-- description: Per run, device and allocator: peak live bytes, replaying allocation and free events in time order (events at one timestamp net out first), when it was first reached and what is still live at the end; planned chunks without a timestamp (MegEngine) count as live throughout and add to the peak; reported_peak_bytes is the largest allocator total the source itself wrote (XProf memory profile, PyTorch memory events).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- scope: run_id
WITH a AS (
    SELECT run_id, device, allocator, ts_ns, bytes, total_allocated_bytes
    FROM allocations
    WHERE bytes IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
),
ev AS (
    SELECT run_id, device, allocator, ts_ns, sum(bytes) AS delta_bytes
    FROM a
    WHERE ts_ns IS NOT NULL
    GROUP BY run_id, device, allocator, ts_ns
),
live AS (
    SELECT *,
           sum(delta_bytes) OVER (PARTITION BY run_id, device, allocator ORDER BY ts_ns
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS live_bytes
    FROM ev
),
peaks AS (
    SELECT *, max(live_bytes) OVER (PARTITION BY run_id, device, allocator) AS peak_live_bytes
    FROM live
),
timed AS (
    SELECT run_id, device, allocator,
           max(peak_live_bytes) AS dynamic_peak_bytes,
           min(CASE WHEN live_bytes = peak_live_bytes THEN ts_ns END) AS peak_ts_ns,
           sum(delta_bytes) AS end_bytes
    FROM peaks
    GROUP BY run_id, device, allocator
),
stats AS (
    SELECT run_id, device, allocator,
           sum(CASE WHEN ts_ns IS NOT NULL AND bytes > 0 THEN 1 ELSE 0 END) AS allocs,
           sum(CASE WHEN ts_ns IS NOT NULL AND bytes < 0 THEN 1 ELSE 0 END) AS frees,
           sum(CASE WHEN ts_ns IS NOT NULL AND bytes > 0 THEN bytes ELSE 0 END) AS allocated_bytes,
           sum(CASE WHEN ts_ns IS NULL THEN 1 ELSE 0 END) AS chunks,
           sum(CASE WHEN ts_ns IS NULL THEN bytes END) AS chunk_bytes,
           max(total_allocated_bytes) AS reported_peak_bytes
    FROM a
    GROUP BY run_id, device, allocator
)
SELECT
    s.run_id,
    s.device,
    s.allocator,
    CAST(coalesce(t.dynamic_peak_bytes, 0) + coalesce(s.chunk_bytes, 0) AS BIGINT) AS peak_bytes,
    CAST(t.dynamic_peak_bytes AS BIGINT) AS dynamic_peak_bytes,
    CAST(s.chunk_bytes AS BIGINT) AS chunk_bytes,
    t.peak_ts_ns,
    CAST(t.end_bytes AS BIGINT) AS end_bytes,
    CAST(s.allocs AS BIGINT) AS allocs,
    CAST(s.frees AS BIGINT) AS frees,
    CAST(s.allocated_bytes AS BIGINT) AS allocated_bytes,
    CAST(s.chunks AS BIGINT) AS chunks,
    s.reported_peak_bytes
FROM stats s
-- IS NOT DISTINCT FROM: a NULL allocator still matches itself.
LEFT JOIN timed t
  ON t.run_id = s.run_id AND t.device = s.device AND t.allocator IS NOT DISTINCT FROM s.allocator
ORDER BY s.run_id, s.device, peak_bytes DESC, s.allocator
