-- title: NCCL collective bandwidth per run
-- description: Per run, rank, collective, dtype, message size and group size: NCCL kernels (those whose Kineto args name the collective), their time, and algorithm and bus bandwidth in GB/s as nccl-tests defines them; the one definition behind nccl_bandwidth and rollup_nccl_bandwidth (whole runs).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only collectives launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only collectives launched in steps <= this (NULL: to the last)
-- rollup: rollup_nccl_bandwidth
-- columns: run_id rank collective dtype message_bytes group_size kernels total_ns algbw_gbps busbw_gbps
-- rollup-filter: run_id
-- reads: kernels
WITH c AS (
    SELECT run_id, rank, device, duration_ns,
           lower(json_extract_string(params, '$."Collective name"')) AS collective,
           json_extract_string(params, '$.dtype') AS dtype,
           CAST(json_extract_string(params, '$."Group size"') AS BIGINT) AS group_size,
           greatest(CAST(json_extract_string(params, '$."In msg nelems"') AS BIGINT),
                    CAST(json_extract_string(params, '$."Out msg nelems"') AS BIGINT)) AS nelems
    FROM kernels
    WHERE kind = 'kernel' AND duration_ns > 0
      AND json_extract_string(params, '$."Collective name"') IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
sized AS (
    SELECT *, nelems * CASE lower(dtype)
        WHEN 'double' THEN 8 WHEN 'long' THEN 8 WHEN 'complexfloat' THEN 8 WHEN 'complexdouble' THEN 16
        WHEN 'float' THEN 4 WHEN 'int' THEN 4
        WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'short' THEN 2
        WHEN 'byte' THEN 1 WHEN 'char' THEN 1 WHEN 'bool' THEN 1
        WHEN 'float8_e4m3fn' THEN 1 WHEN 'float8_e5m2' THEN 1
        END AS message_bytes,
        CASE WHEN collective IN ('allreduce', 'all_reduce') THEN 2.0 * (group_size - 1) / group_size
             WHEN collective IN ('allgather', 'all_gather', '_allgather_base', 'all_gather_into_tensor',
                                 'reduce_scatter', 'reducescatter', '_reduce_scatter_base',
                                 'reduce_scatter_tensor', 'all_to_all', 'alltoall', 'all_to_allv', 'alltoallv')
                  THEN 1.0 * (group_size - 1) / group_size
             ELSE 1.0 END AS bus_factor
    FROM c
)
SELECT run_id, rank, collective, dtype, message_bytes, group_size,
       count(*) AS kernels,
       CAST(sum(duration_ns) AS BIGINT) AS total_ns,
       round(sum(message_bytes) / sum(duration_ns), 3) AS algbw_gbps,
       round(sum(message_bytes) / sum(duration_ns) * max(bus_factor), 3) AS busbw_gbps  -- one value per group
FROM sized
GROUP BY run_id, rank, collective, dtype, message_bytes, group_size
