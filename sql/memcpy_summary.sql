-- title: Memory copies and sets
-- description: GPU memcpy and memset per run, device, kind and direction (HtoD, DtoH, DtoD, ...): operations, total bytes, total time and achieved GB/s (Nsight Systems cuda_gpu_mem_size_sum / cuda_gpu_mem_time_sum).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- scope: run_id
SELECT
    run_id,
    device,
    kind,
    copy_kind,
    count(*) AS operations,
    CAST(sum(bytes) AS BIGINT) AS total_bytes,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
    CAST(round(CAST(avg(bytes) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_bytes,
    min(bytes) AS min_bytes,
    max(bytes) AS max_bytes,
    -- bytes per ns = GB/s (10^9 bytes a second); only rows that know their byte count count
    round(sum(bytes) / nullif(sum(CASE WHEN bytes IS NOT NULL THEN duration_ns END), 0), 3) AS gb_per_s
FROM kernels
WHERE kind IN ('memcpy', 'memset')
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
GROUP BY run_id, device, kind, copy_kind
ORDER BY run_id, device, kind, copy_kind
