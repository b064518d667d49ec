-- title: Collectives
-- description: Communication kernels (NCCL/RCCL, all-reduce, all-gather, reduce-scatter, all-to-all, by name) per run, device and name: instances, time, share of all kernel time, and how much of it overlaps non-collective kernels running at the same time on other streams versus exposed (HTA communication/computation overlap).
-- scope: run_id
-- The metric (sql/metrics/collectives.sql) is read from its per-run rollup where its header
-- says the rollup serves the values (whole runs without name_like), else computed from raw rows.
WITH coll AS (
-- include: metrics/collectives.sql
)
SELECT run_id, device, name, instances, total_ns, kernel_time_pct, overlapped_ns, exposed_ns, overlap_pct
FROM coll
ORDER BY run_id, device, total_ns DESC, name
