-- title: Roofline per kernel
-- description: Per run, device, kernel name and precision: the FLOPs and bytes attributed to the kernel from the op that launched it (in proportion to time), arithmetic intensity (FLOP/byte), achieved TFLOP/s, and the roofline ceiling that bounds it: min(peak TFLOP/s, intensity x peak bandwidth), 'memory' below the ridge point, 'compute' above, with the share of that ceiling achieved. Peaks: the parameters or run.json labels, else the datasheet for the trace's GPU (bandwidth: what the trace states, else the datasheet).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: peak_tflops DOUBLE>0 NULL Peak TFLOP/s (NULL: the run.json label peak_tflops, else the datasheet peak of the run's GPU at the kernel's precision)
-- param: peak_gbps DOUBLE>0 NULL Peak memory bandwidth, GB/s (NULL: the trace's own figure, else the datasheet's)
-- param: gpu_model VARCHAR NULL GPU model to take the datasheet peaks of, e.g. H100 SXM (NULL: the run.json label gpu_model, else the trace's GPU)
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
per_kernel AS (
    SELECT run_id, device, name, dtype, count(*) AS instances, sum(duration_ns) AS total_ns,
           sum(flops) AS flops, sum(bytes) AS bytes
    FROM kf
    GROUP BY run_id, device, name, dtype
),
with_peaks AS (
    SELECT k.*, g.gpu_model,
           coalesce(g.override_tflops, p.peak_tflops) AS peak_tflops,
           coalesce($peak_gbps, g.trace_gbps, p.peak_gbps) AS peak_gbps,
           k.flops / nullif(k.bytes, 0) AS intensity
    FROM per_kernel AS k
    LEFT JOIN run_gpu AS g ON g.run_id = k.run_id
    LEFT JOIN datasheet AS p ON p.gpu_model = g.gpu_model AND p.dtype = k.dtype
),
ceilings AS (
    SELECT *,
           -- intensity (FLOP/byte) x GB/s = GFLOP/s; / 1000: TFLOP/s
           least(peak_tflops, intensity * peak_gbps / 1000) AS ceiling_tflops,
           peak_tflops * 1000 / nullif(peak_gbps, 0) AS ridge_flop_per_byte
    FROM with_peaks
)
SELECT
    run_id, device, name AS kernel, dtype, instances, CAST(total_ns AS BIGINT) AS total_ns,
    -- round first: the shares sum to a double, which Spark's CAST truncates and DuckDB's rounds
    CAST(round(flops) AS BIGINT) AS flops, CAST(round(bytes) AS BIGINT) AS bytes,
    round(intensity, 3) AS intensity_flop_per_byte,
    round(flops / nullif(total_ns, 0) / 1000, 3) AS achieved_tflops,
    gpu_model, peak_tflops, peak_gbps,
    round(ridge_flop_per_byte, 3) AS ridge_flop_per_byte,
    round(ceiling_tflops, 3) AS ceiling_tflops,
    CASE WHEN intensity IS NULL OR ridge_flop_per_byte IS NULL THEN NULL
         WHEN intensity < ridge_flop_per_byte THEN 'memory' ELSE 'compute' END AS bound,
    round(100.0 * flops / nullif(total_ns, 0) / 1000 / nullif(ceiling_tflops, 0), 2) AS ceiling_pct
FROM ceilings
ORDER BY total_ns DESC, run_id, device, kernel, dtype
LIMIT $limit
