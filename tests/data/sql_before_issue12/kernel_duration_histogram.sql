-- title: Kernel duration histogram
-- description: How many kernels fall in each duration bucket, and their time, per run and device: power-of-two buckets [2^k, 2^(k+1)) ns by default, fixed-width buckets when bucket_ns is given (Nsight Systems / HTA duration distribution).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR 'kernel' Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: bucket_ns BIGINT>0 NULL Fixed bucket width in ns (NULL: power-of-two buckets)
-- scope: run_id
WITH k AS (
    SELECT run_id, device, duration_ns,
           -- log2 of a double may land a hair off at exact powers of two: correct by one.
           CAST(floor(log2(greatest(duration_ns, 1))) AS BIGINT) AS k0
    FROM kernels
    WHERE duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($kind IS NULL OR kind = $kind)
),
b AS (
    SELECT run_id, device, duration_ns,
           CASE
               WHEN $bucket_ns IS NOT NULL THEN CAST(floor(duration_ns / $bucket_ns) AS BIGINT) * $bucket_ns
               WHEN duration_ns < 1 THEN 0
               WHEN greatest(duration_ns, 1) >= power(2, k0 + 1) THEN CAST(power(2, k0 + 1) AS BIGINT)
               WHEN greatest(duration_ns, 1) < power(2, k0) THEN CAST(power(2, k0 - 1) AS BIGINT)
               ELSE CAST(power(2, k0) AS BIGINT)
           END AS bucket_lo_ns
    FROM k
)
SELECT
    run_id,
    device,
    bucket_lo_ns,
    CASE
        WHEN $bucket_ns IS NOT NULL THEN bucket_lo_ns + $bucket_ns
        WHEN bucket_lo_ns = 0 THEN 1
        ELSE 2 * bucket_lo_ns
    END AS bucket_hi_ns,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY run_id, device), 2) AS instances_pct,
    round(100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (PARTITION BY run_id, device), 0), 2) AS time_pct
FROM b
GROUP BY run_id, device, bucket_lo_ns
ORDER BY run_id, device, bucket_lo_ns
