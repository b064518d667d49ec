-- title: Op to kernel map
-- description: Which op launched which GPU kernels, copies and sets, per run and GPU: launches and GPU time per (op, kernel), the op's type from nodes of the same run, and the kernel's share of that op's GPU time; node_name NULL collects activity whose launching op is unknown (HTA kernel-to-op attribution).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: node_name VARCHAR NULL Only this op (NULL: every op)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
WITH ops AS (
    -- An op's node name is its key within a run; its nodes may sit on the host (Kineto)
    -- or on the GPU (TF), so match on run and name, not device.
    SELECT run_id, node_name, min(op_type) AS op_type
    FROM nodes
    WHERE ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, node_name
),
k AS (
    SELECT run_id, device, node_name, kind, name,
           count(*) AS launches,
           CAST(sum(duration_ns) AS BIGINT) AS gpu_ns
    FROM kernels
    WHERE ($run_id IS NULL OR run_id = $run_id)
      AND ($node_name IS NULL OR node_name = $node_name)
    GROUP BY run_id, device, node_name, kind, name
)
SELECT
    k.run_id,
    k.device,
    k.node_name,
    ops.op_type,
    k.kind,
    k.name AS kernel_name,
    k.launches,
    k.gpu_ns,
    CAST(sum(k.gpu_ns) OVER (PARTITION BY k.run_id, k.device, k.node_name) AS BIGINT) AS op_gpu_ns,
    round(100.0 * k.gpu_ns / nullif(sum(k.gpu_ns) OVER (PARTITION BY k.run_id, k.device, k.node_name), 0), 2) AS op_time_pct
FROM k
LEFT JOIN ops ON ops.run_id = k.run_id AND ops.node_name = k.node_name
ORDER BY op_gpu_ns DESC, k.run_id, k.device, k.node_name, k.gpu_ns DESC, k.name, k.kind
LIMIT $limit
