-- title: Step times
-- description: Per run and step: wall-clock span from the first op or GPU activity to the last one ends, GPU kernel time and its share of the span, and node and kernel counts; step NULL collects what lies outside any step (HTA / XProf step time).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
WITH spans AS (
    SELECT run_id, step, start_ns, start_ns + duration_ns AS end_ns,
           0 AS kernel_ns, 1 AS is_node, 0 AS is_kernel
    FROM nodes
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
    UNION ALL
    SELECT run_id, step, start_ns, start_ns + duration_ns AS end_ns,
           CASE WHEN kind = 'kernel' THEN duration_ns ELSE 0 END AS kernel_ns,
           0 AS is_node,
           CASE WHEN kind = 'kernel' THEN 1 ELSE 0 END AS is_kernel
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
)
SELECT
    run_id,
    step,
    min(start_ns) AS start_ns,
    max(end_ns) AS end_ns,
    max(end_ns) - min(start_ns) AS wall_ns,
    CAST(sum(kernel_ns) AS BIGINT) AS gpu_kernel_ns,
    round(100.0 * sum(kernel_ns) / nullif(max(end_ns) - min(start_ns), 0), 2) AS gpu_kernel_pct,
    CAST(sum(is_node) AS BIGINT) AS nodes,
    CAST(sum(is_kernel) AS BIGINT) AS kernels
FROM spans
GROUP BY run_id, step
ORDER BY run_id, step NULLS LAST
