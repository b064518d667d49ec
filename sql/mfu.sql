-- title: MFU per step
-- description: Model FLOPs utilization per run, rank and step: the FLOPs of the step's ops (each op counted once: at the innermost op with FLOPs, `flops_counted`) over (device step time x the peak TFLOP/s of the run's GPU at the run's precision, the one carrying most of its FLOPs), with run_mfu_pct over all the run's numbered steps; ops of unknown FLOPs count zero (flops_unknown_ops lists them). Peak: the peak_tflops parameter or run.json label, else the datasheet (sql/metrics/gpu_peaks.sql) for the trace's GPU (or the gpu_model parameter / label).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: peak_tflops DOUBLE>0 NULL Peak TFLOP/s to divide by (NULL: the run.json label peak_tflops, else the datasheet peak of the run's GPU and precision)
-- param: gpu_model VARCHAR NULL GPU model to take the datasheet peak of, as sql/metrics/gpu_peaks.sql names it, e.g. H100 SXM (NULL: the run.json label gpu_model, else the trace's GPU)
-- param: dtype VARCHAR NULL Precision whose peak applies: fp32, tf32, bf16, fp16, fp8, fp64, int8 (NULL: the run's, by FLOPs)
-- scope: run_id
WITH datasheet AS (
-- include: metrics/gpu_peaks.sql
),
run_gpu AS (
-- include: metrics/run_gpu.sql
),
step_times AS (
-- include: metrics/step_times.sql
),
op_flops AS (
-- include: metrics/step_flops.sql
),
run_dtype AS (  -- the precision carrying most of the run's FLOPs
    SELECT run_id, dtype
    FROM (SELECT run_id, dtype,
                 row_number() OVER (PARTITION BY run_id ORDER BY sum(flops) DESC, dtype) AS k
          FROM op_flops
          GROUP BY run_id, dtype) AS ranked
    WHERE k = 1
),
step_flops AS (
    SELECT run_id, rank, step, sum(flops) AS flops
    FROM op_flops
    GROUP BY run_id, rank, step
),
step_rows AS (
    SELECT s.run_id, s.rank, s.step, s.device_step_ns, coalesce(f.flops, 0) AS flops
    FROM step_times AS s
    LEFT JOIN step_flops AS f
      ON f.run_id = s.run_id AND f.rank IS NOT DISTINCT FROM s.rank AND f.step IS NOT DISTINCT FROM s.step
),
peaks AS (
    SELECT g.run_id, g.gpu_model, g.gpu_name, coalesce($dtype, d.dtype) AS dtype,
           coalesce(g.override_tflops, p.peak_tflops) AS peak_tflops
    FROM run_gpu AS g
    LEFT JOIN run_dtype AS d ON d.run_id = g.run_id
    LEFT JOIN datasheet AS p ON p.gpu_model = g.gpu_model AND p.dtype = coalesce($dtype, d.dtype)
),
runs_total AS (
    SELECT run_id, sum(flops) AS flops, sum(device_step_ns) AS device_ns
    FROM step_rows
    WHERE step IS NOT NULL
    GROUP BY run_id
)
SELECT
    s.run_id,
    s.rank,
    s.step,
    s.device_step_ns,
    CAST(s.flops AS BIGINT) AS flops,
    p.gpu_name,
    p.gpu_model,
    p.dtype,
    p.peak_tflops,
    -- FLOP per ns = GFLOP/s; / 1000: TFLOP/s
    round(s.flops / nullif(s.device_step_ns, 0) / 1000, 3) AS achieved_tflops,
    round(100.0 * s.flops / nullif(s.device_step_ns * p.peak_tflops * 1000, 0), 3) AS mfu_pct,
    round(100.0 * t.flops / nullif(t.device_ns * p.peak_tflops * 1000, 0), 3) AS run_mfu_pct
FROM step_rows AS s
LEFT JOIN peaks AS p ON p.run_id = s.run_id
LEFT JOIN runs_total AS t ON t.run_id = s.run_id
ORDER BY s.run_id, s.rank NULLS LAST, s.step NULLS LAST
