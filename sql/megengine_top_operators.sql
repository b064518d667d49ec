-- title: MegEngine top operators
-- description: The MegEngine operators that took the most device time, with their type, share of their run's device time, FLOPs and achieved GFLOP/s and GB/s.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: limit BIGINT>=0 20 Rows to return
-- scope: run_id
WITH k AS (
    -- One operator may run on several comp nodes; sum them per operator.
    SELECT run_id, source_file, node_name, name AS op_type,
           count(*) AS executions, CAST(sum(duration_ns) AS BIGINT) AS device_ns
    FROM kernels
    WHERE source_format = 'megengine'
      AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, source_file, node_name, name
),
n AS (
    SELECT run_id, source_file, node_name, device, flops, memory_bytes
    FROM nodes
    WHERE source_format = 'megengine'
      AND ($run_id IS NULL OR run_id = $run_id)
)
SELECT
    k.run_id,
    k.node_name,
    k.op_type,
    n.device,
    k.executions,
    k.device_ns,
    round(100.0 * k.device_ns / sum(k.device_ns) OVER (PARTITION BY k.run_id), 2) AS run_time_pct,
    n.flops,
    n.memory_bytes,
    -- FLOP per ns = GFLOP/s; byte per ns = GB/s.
    round(n.flops / nullif(k.device_ns, 0), 2) AS gflops_per_s,
    round(n.memory_bytes / nullif(k.device_ns, 0), 2) AS gb_per_s
FROM k
LEFT JOIN n
  ON n.run_id = k.run_id AND n.source_file = k.source_file AND n.node_name = k.node_name
ORDER BY k.device_ns DESC, k.run_id, k.node_name
LIMIT $limit
