-- title: Kernel launch configuration
-- description: Per run and kernel name and launch configuration: grid, block, registers per thread, shared memory and estimated occupancy where the source records them (NULL where it does not), with instances and GPU time, largest first (XProf kernel stats).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
-- Every group is one run's and one device's, so the ingest computes each run's groups from
-- its own `kernels` rows with the metric's one definition, sql/metrics/kernel_launch_config.sql
-- (tracedb.rollups), and this filters and orders that per-run rollup: the 1,000-run fleet
-- (10.4 M kernels rows) took 1.25 s from raw rows.
SELECT run_id, device, name, grid, block, registers_per_thread, shared_memory_bytes,
       avg_occupancy_pct, instances, total_ns, avg_tenths / 10 AS avg_ns
FROM rollup_kernel_launch_config
WHERE ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
ORDER BY total_ns DESC, run_id, device, name, grid, block, registers_per_thread, shared_memory_bytes
LIMIT $limit
