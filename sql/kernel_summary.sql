-- title: Kernel summary
-- description: Per run, device and kernel name: instances, total, average, min and max time, and share of that run and device's GPU time, largest first (Nsight Systems cuda_gpu_kern_sum / cuda_gpu_sum, per run).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR 'kernel' Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
-- The metric sql/metrics/kernel_names.sql (per run, device, kind and name), read from its
-- per-run rollup; this query keeps the kind asked for and adds each device's share.
WITH m AS (
-- include: metrics/kernel_names.sql
),
g AS (
    SELECT run_id, device, activity_kind AS kind, name, instances, total_ns, avg_duration AS avg_ns, min_ns, max_ns
    FROM m
    WHERE ($kind IS NULL OR activity_kind = $kind)
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
