-- title: Kernel duration buckets
-- description: Per run, device, activity kind and duration bucket (power-of-two buckets [2^k, 2^(k+1)) ns, or fixed-width buckets of bucket_ns): activities with a duration and their summed time; the one definition behind kernel_duration_histogram and rollup_kernel_histogram (power-of-two buckets).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: bucket_ns BIGINT>0 NULL Fixed bucket width in ns (NULL: power-of-two buckets)
-- rollup: rollup_kernel_histogram
-- columns: run_id device activity_kind bucket_lo_ns instances total_ns
-- rollup-filter: run_id device
-- reads: kernels
WITH k AS (
    SELECT run_id, device, kind, duration_ns,
           -- log2 of a double may land a hair off at exact powers of two: correct by one.
           CAST(floor(log2(greatest(duration_ns, 1))) AS BIGINT) AS k0
    FROM kernels
    WHERE duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
),
b AS (
    SELECT run_id, device, kind, duration_ns,
           CASE
               WHEN $bucket_ns IS NOT NULL THEN CAST(floor(duration_ns / $bucket_ns) AS BIGINT) * $bucket_ns
               WHEN duration_ns < 1 THEN 0
               WHEN greatest(duration_ns, 1) >= power(2, k0 + 1) THEN CAST(power(2, k0 + 1) AS BIGINT)
               WHEN greatest(duration_ns, 1) < power(2, k0) THEN CAST(power(2, k0 - 1) AS BIGINT)
               ELSE CAST(power(2, k0) AS BIGINT)
           END AS bucket_lo_ns
    FROM k
)
SELECT run_id, device, kind AS activity_kind, bucket_lo_ns, count(*) AS instances,
       CAST(sum(duration_ns) AS BIGINT) AS total_ns
FROM b
GROUP BY run_id, device, kind, bucket_lo_ns
