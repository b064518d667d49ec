-- title: FLOPs per op type
-- description: Per run and op type with known FLOPs: ops, FLOPs (each op's own; counted_flops: only where flops_counted, what mfu sums), bytes, the rule that gave them, the time of the kernels the ops launched themselves (a wrapper such as aten::linear launches none: its FLOPs show with no time), achieved TFLOP/s on that time and its share of the peak of the run's GPU at the op's precision.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: peak_tflops DOUBLE>0 NULL Peak TFLOP/s (NULL: the run.json label peak_tflops, else the datasheet peak of the run's GPU at the op's precision)
-- param: gpu_model VARCHAR NULL GPU model to take the datasheet peak of, e.g. H100 SXM (NULL: the run.json label gpu_model, else the trace's GPU)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
WITH datasheet AS (
-- include: metrics/gpu_peaks.sql
),
run_gpu AS (
-- include: metrics/run_gpu.sql
),
kf AS (
-- include: metrics/kernel_flops.sql
),
ops AS (
    SELECT run_id, op_type, coalesce(flops_dtype, 'fp32') AS dtype, min(flops_rule) AS rule,
           count(*) AS ops, sum(flops) AS flops,
           sum(CASE WHEN coalesce(flops_counted, TRUE) THEN flops ELSE 0 END) AS counted_flops,
           sum(memory_bytes) AS bytes
    FROM nodes
    WHERE flops IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, op_type, coalesce(flops_dtype, 'fp32')
),
timed AS (
    SELECT run_id, op_type, dtype, sum(duration_ns) AS kernel_ns, sum(flops) AS kernel_flops
    FROM kf
    GROUP BY run_id, op_type, dtype
)
SELECT
    o.run_id, o.op_type, o.dtype, o.rule, o.ops,
    CAST(o.flops AS BIGINT) AS flops, CAST(o.counted_flops AS BIGINT) AS counted_flops,
    CAST(o.bytes AS BIGINT) AS bytes,
    CAST(t.kernel_ns AS BIGINT) AS kernel_ns,
    round(t.kernel_flops / nullif(t.kernel_ns, 0) / 1000, 3) AS achieved_tflops,
    g.gpu_model,
    coalesce(g.override_tflops, p.peak_tflops) AS peak_tflops,
    round(100.0 * t.kernel_flops / nullif(t.kernel_ns, 0) / 1000
          / nullif(coalesce(g.override_tflops, p.peak_tflops), 0), 2) AS peak_pct
FROM ops AS o
LEFT JOIN timed AS t ON t.run_id = o.run_id AND t.op_type = o.op_type AND t.dtype = o.dtype
LEFT JOIN run_gpu AS g ON g.run_id = o.run_id
LEFT JOIN datasheet AS p ON p.gpu_model = g.gpu_model AND p.dtype = o.dtype
ORDER BY o.counted_flops DESC, o.flops DESC, o.run_id, o.op_type, o.dtype
LIMIT $limit
