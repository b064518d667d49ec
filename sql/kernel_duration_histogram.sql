-- title: Kernel duration histogram
-- description: How many kernels fall in each duration bucket, and their time, per run and device: power-of-two buckets [2^k, 2^(k+1)) ns by default, fixed-width buckets when bucket_ns is given (Nsight Systems / HTA duration distribution).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR 'kernel' Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: bucket_ns BIGINT>0 NULL Fixed bucket width in ns (NULL: power-of-two buckets)
-- scope: run_id
-- The metric sql/metrics/kernel_histogram.sql (per run, device, kind and bucket), read from
-- its per-run rollup for power-of-two buckets; this query adds up the kinds asked for.
WITH m AS (
-- include: metrics/kernel_histogram.sql
),
g AS (
    SELECT run_id, device, bucket_lo_ns, CAST(sum(instances) AS BIGINT) AS instances, sum(total_ns) AS total_ns
    FROM m
    WHERE ($kind IS NULL OR activity_kind = $kind)
    GROUP BY run_id, device, bucket_lo_ns
),
d AS (
    -- the device's totals from the buckets: a window over the groups (sum(count(*)) OVER)
    -- made DuckDB join a second scan of every kernel row
    SELECT run_id, device, sum(instances) AS instances, sum(total_ns) AS total_ns
    FROM g
    GROUP BY run_id, device
)
SELECT
    g.run_id,
    g.device,
    bucket_lo_ns,
    CASE
        WHEN $bucket_ns IS NOT NULL THEN bucket_lo_ns + $bucket_ns
        WHEN bucket_lo_ns = 0 THEN 1
        ELSE 2 * bucket_lo_ns
    END AS bucket_hi_ns,
    g.instances,
    CAST(g.total_ns AS BIGINT) AS total_ns,
    round(100.0 * g.instances / d.instances, 2) AS instances_pct,
    round(100.0 * g.total_ns / nullif(d.total_ns, 0), 2) AS time_pct
FROM g
JOIN d ON g.run_id IS NOT DISTINCT FROM d.run_id AND g.device IS NOT DISTINCT FROM d.device
ORDER BY g.run_id, g.device, bucket_lo_ns
