-- title: Launch delay
-- description: Time from the host launch call to the GPU start (kernels.start_ns - launch_start_ns) per run, device and kind: count, average, min, median, p95 and max, for activity whose launch call the source records (HTA queue length / kernel launch statistics).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
WITH d AS (
    SELECT run_id, device, kind, start_ns - launch_start_ns AS delay_ns
    FROM kernels
    WHERE start_ns IS NOT NULL AND launch_start_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
ranked AS (
    -- Exact percentiles by rank (linear interpolation, as quantile_cont / percentile_cont),
    -- spelled with window functions so that every engine computes the same numbers.
    SELECT *,
           row_number() OVER (PARTITION BY run_id, device, kind ORDER BY delay_ns) - 1 AS r,
           count(*) OVER (PARTITION BY run_id, device, kind) - 1 AS last_r
    FROM d
),
p AS (
    SELECT *, 0.5 * last_r AS p50_pos, 0.95 * last_r AS p95_pos
    FROM ranked
)
SELECT
    run_id,
    device,
    kind,
    count(*) AS launches,
    -- DECIMAL before rounding: DuckDB and Spark round a double's ties differently
    CAST(round(CAST(avg(delay_ns) AS DECIMAL(38, 6)), 1) AS DOUBLE) AS avg_ns,
    min(delay_ns) AS min_ns,
    -- the fraction as DOUBLE: bigint * DECIMAL is a double in DuckDB, exact in Spark
    max(CASE WHEN r = floor(p50_pos) THEN delay_ns END)
        + (max(CASE WHEN r = ceil(p50_pos) THEN delay_ns END) - max(CASE WHEN r = floor(p50_pos) THEN delay_ns END))
          * CAST(max(p50_pos) - floor(max(p50_pos)) AS DOUBLE) AS p50_ns,
    max(CASE WHEN r = floor(p95_pos) THEN delay_ns END)
        + (max(CASE WHEN r = ceil(p95_pos) THEN delay_ns END) - max(CASE WHEN r = floor(p95_pos) THEN delay_ns END))
          * CAST(max(p95_pos) - floor(max(p95_pos)) AS DOUBLE) AS p95_ns,
    max(delay_ns) AS max_ns
FROM p
GROUP BY run_id, device, kind
ORDER BY run_id, device, kind
