-- title: Memory copies and sets
-- description: GPU memcpy and memset per run, device, kind and direction (HtoD, DtoH, DtoD, ...): operations, total bytes, total time and achieved GB/s (Nsight Systems cuda_gpu_mem_size_sum / cuda_gpu_mem_time_sum).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- scope: run_id
-- The metric sql/metrics/memcpy_summary.sql, read from its per-run rollup.
WITH m AS (
-- include: metrics/memcpy_summary.sql
)
SELECT run_id, device, activity_kind AS kind, copy_kind, operations, total_bytes, total_ns, avg_size AS avg_bytes,
       min_bytes, max_bytes, gb_per_s
FROM m
ORDER BY run_id, device, kind, copy_kind
