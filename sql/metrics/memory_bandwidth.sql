-- title: Memory bandwidth per copy type
-- description: Per run, rank, device and copy type: copies, bytes, time, overall and over-time bandwidth; the one definition behind memory_bandwidth and rollup_memory_bandwidth.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only copies launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only copies launched in steps <= this (NULL: to the last)
-- rollup: rollup_memory_bandwidth
-- columns: run_id rank device copy_type copies bytes total_ns gbps points mean_gbps min_gbps max_gbps
-- rollup-filter: run_id
-- reads: kernels
WITH c AS (
    SELECT run_id, rank, device,
           CASE WHEN kind = 'memset' THEN 'Memset' ELSE 'Memcpy ' || coalesce(copy_kind, 'Unknown') END AS copy_type,
           start_ns, duration_ns, bytes,
           1.0 * bytes / greatest(duration_ns, 1) AS gbps
    FROM kernels
    WHERE kind IN ('memcpy', 'memset') AND bytes IS NOT NULL AND start_ns IS NOT NULL
      AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
changes AS (
    SELECT run_id, rank, device, copy_type, start_ns AS t, gbps AS d FROM c
    UNION ALL
    SELECT run_id, rank, device, copy_type, start_ns + greatest(duration_ns, 1), -gbps FROM c
),
series AS (
    SELECT run_id, rank, device, copy_type,
           sum(d) OVER (PARTITION BY run_id, rank, device, copy_type ORDER BY t, d
                        ROWS UNBOUNDED PRECEDING) AS gbps
    FROM changes
),
summary AS (
    SELECT run_id, rank, device, copy_type, count(*) AS points, avg(gbps) AS mean_gbps,
           min(gbps) AS min_gbps, max(gbps) AS max_gbps
    FROM series WHERE gbps > 1e-9  -- a float sum back at zero is not above it
    GROUP BY run_id, rank, device, copy_type
),
totals AS (
    SELECT run_id, rank, device, copy_type, count(*) AS copies, CAST(sum(bytes) AS BIGINT) AS bytes,
           CAST(sum(duration_ns) AS BIGINT) AS total_ns
    FROM c GROUP BY run_id, rank, device, copy_type
)
SELECT t.run_id, t.rank, t.device, t.copy_type, t.copies, t.bytes, t.total_ns,
       round(t.bytes / nullif(t.total_ns, 0), 3) AS gbps,
       s.points, round(s.mean_gbps, 3) AS mean_gbps, round(s.min_gbps, 3) AS min_gbps,
       round(s.max_gbps, 3) AS max_gbps
FROM totals t
LEFT JOIN summary s ON s.run_id = t.run_id AND s.rank IS NOT DISTINCT FROM t.rank
                   AND s.device = t.device AND s.copy_type = t.copy_type
