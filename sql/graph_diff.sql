-- title: Graph diff
-- description: Nodes added in run_b, removed from run_a, and those whose output shapes changed, matched by node name.
-- param: run_a VARCHAR REQUIRED Baseline run
-- param: run_b VARCHAR REQUIRED Run compared with the baseline
-- scope: run_a run_b
WITH ranked AS (
    -- A node may appear once per step: keep its first appearance (row_number rather than
    -- first(... ORDER BY), which Spark and Trino cannot express).
    SELECT run_id, node_name, op_type, device, output_shapes,
           row_number() OVER (PARTITION BY run_id, node_name
                              ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS rn
    FROM nodes
    WHERE run_id = $run_a OR run_id = $run_b
),
a AS (
    SELECT node_name, op_type, device, output_shapes FROM ranked WHERE run_id = $run_a AND rn = 1
),
b AS (
    SELECT node_name, op_type, device, output_shapes FROM ranked WHERE run_id = $run_b AND rn = 1
)
SELECT
    CASE
        WHEN a.node_name IS NULL THEN 'added'
        WHEN b.node_name IS NULL THEN 'removed'
        ELSE 'shape_changed'
    END AS change,
    coalesce(b.node_name, a.node_name) AS node_name,
    coalesce(b.op_type, a.op_type) AS op_type,
    a.device AS device_a,
    b.device AS device_b,
    a.output_shapes AS output_shapes_a,
    b.output_shapes AS output_shapes_b
FROM a
FULL OUTER JOIN b ON a.node_name = b.node_name
WHERE a.node_name IS NULL
   OR b.node_name IS NULL
   OR a.output_shapes IS DISTINCT FROM b.output_shapes
ORDER BY change, node_name
