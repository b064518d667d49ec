-- title: A run's GPU
-- description: Per run: the GPU model whose datasheet peaks apply (the gpu_model parameter, else the run.json label gpu_model, else what tracedb.flops.gpu_model made of the trace's device name at ingest), the trace's device name, the peak TFLOP/s override (the peak_tflops parameter, else the run.json label peak_tflops) and the memory bandwidth the trace states (XSpace), GB/s; included by op_flops, roofline and mfu.
SELECT run_id,
       coalesce($gpu_model, json_extract_string(labels, '$.gpu_model'),
                json_extract_string(metadata, '$.gpu_model')) AS gpu_model,
       json_extract_string(metadata, '$.gpu_name') AS gpu_name,
       coalesce($peak_tflops, TRY_CAST(json_extract_string(labels, '$.peak_tflops') AS DOUBLE)) AS override_tflops,
       TRY_CAST(json_extract_string(metadata, '$.gpu_memory_bytes_per_s') AS DOUBLE) / 1e9 AS trace_gbps
FROM runs
WHERE $run_id IS NULL OR run_id = $run_id
