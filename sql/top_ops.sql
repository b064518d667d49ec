-- title: Top ops
-- description: Framework ops (nodes) by total time per run and device: executions, total, average, min and max duration, and share of that run and device's op time (XProf framework op stats; nested host ops such as Kineto's count their children too).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
-- The metric sql/metrics/op_summary.sql (per run, device and op), read from its per-run rollup.
WITH g AS (
-- include: metrics/op_summary.sql
),
-- Each run and device's op time by a GROUP BY over g rather than a window: DuckDB turns
-- such a window into a self-join whose second scan reads every run's files.
d AS (
    SELECT run_id, device, sum(total_ns) AS device_ns
    FROM g
    GROUP BY run_id, device
)
SELECT
    g.run_id,
    g.device,
    node_name,
    op_type,
    executions,
    total_ns,
    avg_duration AS avg_ns,
    min_ns,
    max_ns,
    round(100.0 * total_ns / nullif(device_ns, 0), 2) AS time_pct
FROM g
JOIN d ON g.run_id IS NOT DISTINCT FROM d.run_id AND g.device IS NOT DISTINCT FROM d.device
ORDER BY total_ns DESC, run_id, device, node_name
LIMIT $limit
