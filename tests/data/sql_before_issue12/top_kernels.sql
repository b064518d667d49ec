-- title: Top kernels
-- description: Per kernel name across runs: instances, total, average, median, min, max, standard deviation and share of all kernel time, largest first (Nsight Systems cuda_gpu_kern_sum).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: limit BIGINT>=0 50 Rows to return
WITH k AS (
    SELECT
        name,
        duration_ns,
        -- rank within the name, for an exact median that every engine computes alike
        row_number() OVER (PARTITION BY name ORDER BY duration_ns) AS rn,
        count(*) OVER (PARTITION BY name) AS cnt
    FROM kernels
    WHERE kind = 'kernel'
      AND ($run_id IS NULL OR run_id = $run_id)
)
SELECT
    name,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    round(avg(duration_ns), 1) AS avg_ns,
    avg(CASE WHEN rn IN (floor((cnt + 1) / 2.0), floor((cnt + 2) / 2.0)) THEN duration_ns END) AS median_ns,
    min(duration_ns) AS min_ns,
    max(duration_ns) AS max_ns,
    round(stddev_samp(duration_ns), 1) AS stddev_ns,
    round(100.0 * sum(duration_ns) / sum(sum(duration_ns)) OVER (), 2) AS time_pct
FROM k
GROUP BY name
ORDER BY total_ns DESC, name
LIMIT $limit
