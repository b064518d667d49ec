-- title: Top kernels
-- description: Per kernel name across runs: instances, total, average, median, min, max, standard deviation and share of all kernel time, largest first (Nsight Systems cuda_gpu_kern_sum).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
SELECT
    name,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    round(avg(duration_ns), 1) AS avg_ns,
    -- exact (the mean of the two middle values for an even count); tracedb.query.transpile
    -- writes it out for engines without median()
    median(duration_ns) AS median_ns,
    min(duration_ns) AS min_ns,
    max(duration_ns) AS max_ns,
    round(stddev_samp(duration_ns), 1) AS stddev_ns,
    round(100.0 * sum(duration_ns) / sum(sum(duration_ns)) OVER (), 2) AS time_pct
FROM kernels
WHERE kind = 'kernel'
  AND ($run_id IS NULL OR run_id = $run_id)
GROUP BY name
ORDER BY total_ns DESC, name
LIMIT $limit
