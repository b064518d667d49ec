-- title: NCCL collective bandwidth
-- description: Per run, rank, collective, dtype, message size and group size: NCCL kernels (those whose Kineto args name the collective), their time, and the algorithm and bus bandwidth in GB/s as nccl-tests defines them: algbw = message bytes / kernel time, busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 otherwise; message bytes = max(In, Out msg nelems) x the dtype's size.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only collectives launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only collectives launched in steps <= this (NULL: to the last)
-- scope: run_id
-- The metric sql/metrics/nccl_bandwidth.sql: whole runs read its per-run rollup, a step
-- range computes it from raw rows.
WITH bw AS (
-- include: metrics/nccl_bandwidth.sql
)
SELECT run_id, rank, collective, dtype, message_bytes, group_size, kernels, total_ns, algbw_gbps, busbw_gbps
FROM bw
ORDER BY run_id, rank, total_ns DESC, collective, dtype, message_bytes, group_size
