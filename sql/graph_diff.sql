-- title: Graph diff
-- description: Nodes added in run_b, removed from run_a, and those whose output shapes changed, matched by node name.
-- param: run_a VARCHAR REQUIRED Baseline run
-- param: run_b VARCHAR REQUIRED Run compared with the baseline
WITH a AS (
    -- A node may appear once per step: keep its first appearance.
    SELECT node_name,
           first(op_type ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS op_type,
           first(device ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS device,
           first(output_shapes ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS output_shapes
    FROM nodes
    WHERE run_id = $run_a
    GROUP BY node_name
),
b AS (
    SELECT node_name,
           first(op_type ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS op_type,
           first(device ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS device,
           first(output_shapes ORDER BY step NULLS FIRST, seq NULLS LAST, start_ns NULLS LAST) AS output_shapes
    FROM nodes
    WHERE run_id = $run_b
    GROUP BY node_name
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
