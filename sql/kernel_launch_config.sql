-- title: Kernel launch configuration
-- description: Per run and kernel name and launch configuration: grid, block, registers per thread, shared memory and estimated occupancy where the source records them (NULL where it does not), with instances and GPU time, largest first (XProf kernel stats).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
-- Every group is one run's and one device's: the metric sql/metrics/kernel_launch_config.sql,
-- always read from its per-run rollup (its parameters filter it); this orders and limits it.
WITH groups AS (
-- include: metrics/kernel_launch_config.sql
)
SELECT run_id, device, name, grid, block, registers_per_thread, shared_memory_bytes,
       avg_occupancy_pct, instances, total_ns, avg_tenths / 10 AS avg_ns
FROM groups
ORDER BY total_ns DESC, run_id, device, name, grid, block, registers_per_thread, shared_memory_bytes
LIMIT $limit
