-- title: Kernels by name
-- description: Per run, device, activity kind and name: instances, total, average, min and max duration; the one definition behind kernel_summary and rollup_kernel_names (its rows are each one run's, so the rollup stores them whole).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- rollup: rollup_kernel_names
-- columns: run_id device activity_kind name instances total_ns avg_duration min_ns max_ns
-- rollup-filter: run_id device
-- reads: kernels
SELECT
    run_id,
    device,
    kind AS activity_kind,
    name,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
    CAST(round(CAST(avg(duration_ns) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_duration,  -- ns (a double: not named *_ns, the integer ns columns)
    min(duration_ns) AS min_ns,
    max(duration_ns) AS max_ns
FROM kernels
WHERE ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
GROUP BY run_id, device, kind, name
