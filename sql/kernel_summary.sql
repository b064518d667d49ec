-- title: Kernel summary
-- description: Per run, device and kernel name: instances, total, average, min and max time, and share of that run and device's GPU time, largest first (Nsight Systems cuda_gpu_kern_sum / cuda_gpu_sum, per run).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR 'kernel' Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
WITH k AS (
    SELECT run_id, device, kind, name, duration_ns
    FROM kernels
    WHERE ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($kind IS NULL OR kind = $kind)
),
g AS (
    SELECT
        run_id,
        device,
        kind,
        name,
        count(*) AS instances,
        CAST(sum(duration_ns) AS BIGINT) AS total_ns,
        -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
        CAST(round(CAST(avg(duration_ns) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_ns,
        min(duration_ns) AS min_ns,
        max(duration_ns) AS max_ns
    FROM k
    GROUP BY run_id, device, kind, name
),
dev AS (
    -- A GROUP BY joined back, not sum() OVER (PARTITION BY run_id, device): DuckDB plans that
    -- window as a self-join whose second scan reads every run's files even for one run.
    SELECT run_id, device, sum(total_ns) AS device_ns
    FROM g
    GROUP BY run_id, device
)
SELECT
    g.run_id,
    g.device,
    g.kind,
    g.name,
    g.instances,
    g.total_ns,
    g.avg_ns,
    g.min_ns,
    g.max_ns,
    round(100.0 * g.total_ns / nullif(d.device_ns, 0), 2) AS time_pct
FROM g
JOIN dev d ON d.run_id IS NOT DISTINCT FROM g.run_id AND d.device IS NOT DISTINCT FROM g.device
ORDER BY g.run_id, g.device, g.total_ns DESC, g.kind, g.name
LIMIT $limit
