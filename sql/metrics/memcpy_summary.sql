-- title: Memory copies and sets per run
-- description: GPU memcpy and memset per run, device, activity kind and direction: operations, bytes, time and achieved GB/s; the one definition behind memcpy_summary and rollup_memcpy_summary (its rows are each one run's, so the rollup stores them whole).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- rollup: rollup_memcpy_summary
-- columns: run_id device activity_kind copy_kind operations total_bytes total_ns avg_size min_bytes max_bytes gb_per_s
-- rollup-filter: run_id device
-- reads: kernels
SELECT
    run_id,
    device,
    kind AS activity_kind,
    copy_kind,
    count(*) AS operations,
    CAST(sum(bytes) AS BIGINT) AS total_bytes,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
    CAST(round(CAST(avg(bytes) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_size,  -- bytes (a double: not named *bytes, the integer byte columns)
    min(bytes) AS min_bytes,
    max(bytes) AS max_bytes,
    -- bytes per ns = GB/s (10^9 bytes a second); only rows that know their byte count count
    round(sum(bytes) / nullif(sum(CASE WHEN bytes IS NOT NULL THEN duration_ns END), 0), 3) AS gb_per_s
FROM kernels
WHERE kind IN ('memcpy', 'memset')
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
GROUP BY run_id, device, kind, copy_kind
