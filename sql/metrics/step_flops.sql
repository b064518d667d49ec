-- title: FLOPs per step and precision
-- description: Per run, rank, step and precision: the FLOPs of the step's ops, each op counted once (at the innermost op with FLOPs, `flops_counted`; precision fp32 where unknown); the one definition behind mfu and rollup_step_flops.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- rollup: rollup_step_flops
-- columns: run_id rank step dtype flops
-- rollup-filter: run_id
-- reads: nodes
SELECT run_id, rank, step, coalesce(flops_dtype, 'fp32') AS dtype, CAST(sum(flops) AS BIGINT) AS flops
FROM nodes
WHERE flops IS NOT NULL AND coalesce(flops_counted, TRUE)
  AND ($run_id IS NULL OR run_id = $run_id)
GROUP BY run_id, rank, step, coalesce(flops_dtype, 'fp32')
