-- title: MegEngine operator types
-- description: Device time of MegEngine operators by operator type (executions, total, mean, max) with throughput from the footprint (GFLOP/s, GB/s), ordered by time, flops or memory.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: order_by VARCHAR{time,flops,memory} 'time' Sort key: time (total device time), flops (total FLOPs) or memory (total memory traffic)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
WITH k AS (
    SELECT run_id, source_file, node_name,
           count(*) AS executions, CAST(sum(duration_ns) AS BIGINT) AS device_ns, max(duration_ns) AS max_ns
    FROM kernels
    WHERE source_format = 'megengine'
      AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, source_file, node_name
),
ops AS (
    SELECT n.op_type, k.executions, k.device_ns, k.max_ns, n.flops, n.memory_bytes
    FROM k
    JOIN nodes AS n
      ON n.run_id = k.run_id AND n.source_file = k.source_file AND n.node_name = k.node_name
    WHERE n.source_format = 'megengine'
      AND ($run_id IS NULL OR n.run_id = $run_id)  -- so the nodes scan reads one run's files
),
t AS (
    SELECT
        op_type,
        CAST(sum(executions) AS BIGINT) AS executions,
        CAST(sum(device_ns) AS BIGINT) AS total_ns,
        round(sum(device_ns) / sum(executions), 1) AS mean_ns,
        max(max_ns) AS max_ns,
        CAST(sum(flops) AS BIGINT) AS total_flops,
        CAST(sum(memory_bytes) AS BIGINT) AS total_memory_bytes
    FROM ops
    GROUP BY op_type
)
SELECT
    op_type,
    executions,
    total_ns,
    mean_ns,
    max_ns,
    round(100.0 * total_ns / sum(total_ns) OVER (), 2) AS time_pct,
    total_flops,
    total_memory_bytes,
    -- FLOP per ns = GFLOP/s; byte per ns = GB/s.
    round(total_flops / nullif(total_ns, 0), 2) AS gflops_per_s,
    round(total_memory_bytes / nullif(total_ns, 0), 2) AS gb_per_s
FROM t
ORDER BY
    CASE lower($order_by)
        WHEN 'time' THEN CAST(total_ns AS DOUBLE)
        WHEN 'flops' THEN CAST(total_flops AS DOUBLE)
        WHEN 'memory' THEN CAST(total_memory_bytes AS DOUBLE)
    END DESC NULLS LAST,  -- the header lists the allowed values; tracedb checks them first
    op_type
LIMIT $limit
