-- title: Collectives
-- description: Communication kernels (NCCL/RCCL, all-reduce, all-gather, reduce-scatter, all-to-all, by name) per run, device and name: instances, time, share of all kernel time, and how much of it overlaps non-collective kernels running at the same time on other streams versus exposed (HTA communication/computation overlap).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: name_like VARCHAR NULL Also count kernels whose name matches this LIKE pattern as collectives
-- param: step_from BIGINT NULL Only kernels launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only kernels launched in steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: name_like step_from step_to
-- Whole runs without name_like: the per-run rollup, which the ingest computes from each
-- run's own rows with the metric's one definition (tracedb.rollups): a name's class does
-- not depend on other runs, and every figure is per run and device. `name_like` (a
-- pattern chosen at query time) and step ranges compute from the raw rows with that same
-- definition, included below (DuckDB drops the branch it does not need).
WITH raw AS (
-- include: metrics/collectives.sql
)
SELECT run_id, device, name, instances, total_ns, kernel_time_pct, overlapped_ns, exposed_ns, overlap_pct
FROM rollup_collectives
WHERE $name_like IS NULL AND $step_from IS NULL AND $step_to IS NULL
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
UNION ALL
SELECT run_id, device, name, instances, total_ns, kernel_time_pct, overlapped_ns, exposed_ns, overlap_pct
FROM raw
WHERE $name_like IS NOT NULL OR $step_from IS NOT NULL OR $step_to IS NOT NULL
ORDER BY run_id, device, total_ns DESC, name
