-- title: Kernel launch configuration
-- description: Per run and kernel name and launch configuration: grid, block, registers per thread, shared memory and estimated occupancy where the source records them (NULL where it does not), with instances and GPU time (XProf kernel stats).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- rollup: rollup_kernel_launch_config
-- columns: run_id device name grid block registers_per_thread shared_memory_bytes avg_occupancy_pct instances total_ns avg_tenths
-- rollup-filter: run_id device
-- reads: kernels
SELECT
    run_id,
    device,
    name,
    grid,
    block,
    registers_per_thread,
    shared_memory_bytes,
    round(avg(occupancy), 2) AS avg_occupancy_pct,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently; kept in
    -- integer tenths of a ns (the query's avg_ns: this / 10, the same double)
    CAST(10 * round(CAST(avg(duration_ns) AS DECIMAL(38, 6)), 1) AS BIGINT) AS avg_tenths
FROM kernels
WHERE kind = 'kernel'
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
GROUP BY run_id, device, name, grid, block, registers_per_thread, shared_memory_bytes
