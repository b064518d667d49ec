-- title: Time by op type
-- description: Per run, device and op type: executions, distinct nodes, total and average duration and share of that run and device's op time (HTA / XProf op type breakdown).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- scope: run_id
WITH g AS (
    SELECT
        run_id,
        device,
        op_type,
        count(*) AS executions,
        count(DISTINCT node_name) AS nodes,
        CAST(sum(duration_ns) AS BIGINT) AS total_ns,
        -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
        CAST(round(CAST(avg(duration_ns) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_ns
    FROM nodes
    WHERE duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
    GROUP BY run_id, device, op_type
)
SELECT
    run_id,
    device,
    op_type,
    executions,
    nodes,
    total_ns,
    avg_ns,
    round(100.0 * total_ns / nullif(sum(total_ns) OVER (PARTITION BY run_id, device), 0), 2) AS time_pct
FROM g
ORDER BY run_id, device, total_ns DESC, op_type
