-- title: Memory bandwidth
-- description: Per run, rank, device and copy type (Memcpy HtoD / DtoH / DtoD / ..., Memset): copies, bytes, time and their overall bandwidth (bytes / time, GB/s), and the bandwidth over time as Holistic Trace Analysis' get_memory_bw_summary describes it: the sum of the bandwidths (bytes / duration) of the copies of that type running at each change, summarised over the changes where it is above zero (count, mean, min, max).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only copies launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only copies launched in steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: step_from step_to
-- Whole runs: the per-run rollup (tracedb.rollups), the rows the ingest computed from the
-- run's own copies with the metric's one definition (metrics/memory_bandwidth.sql: every
-- row is one run's). Step ranges compute from the raw rows with that same definition
-- (DuckDB drops the branch it does not need). 1,000 runs: 1.09 s from raw rows.
WITH raw AS (
-- include: metrics/memory_bandwidth.sql
)
SELECT run_id, rank, device, copy_type, copies, bytes, total_ns, gbps, points, mean_gbps, min_gbps, max_gbps
FROM rollup_memory_bandwidth
WHERE $step_from IS NULL AND $step_to IS NULL AND ($run_id IS NULL OR run_id = $run_id)
UNION ALL
SELECT run_id, rank, device, copy_type, copies, bytes, total_ns, gbps, points, mean_gbps, min_gbps, max_gbps
FROM raw
WHERE $step_from IS NOT NULL OR $step_to IS NOT NULL
ORDER BY run_id, rank, device, copy_type
