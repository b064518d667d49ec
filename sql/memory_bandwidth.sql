-- title: Memory bandwidth
-- description: Per run, rank, device and copy type (Memcpy HtoD / DtoH / DtoD / ..., Memset): copies, bytes, time and their overall bandwidth (bytes / time, GB/s), and the bandwidth over time as Holistic Trace Analysis' get_memory_bw_summary describes it: the sum of the bandwidths (bytes / duration) of the copies of that type running at each change, summarised over the changes where it is above zero (count, mean, min, max).
-- scope: run_id
-- The metric sql/metrics/memory_bandwidth.sql: whole runs read its per-run rollup, a step
-- range computes it from raw rows.
WITH bw AS (
-- include: metrics/memory_bandwidth.sql
)
SELECT run_id, rank, device, copy_type, copies, bytes, total_ns, gbps, points, mean_gbps, min_gbps, max_gbps
FROM bw
ORDER BY run_id, rank, device, copy_type
