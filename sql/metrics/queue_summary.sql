-- title: Queue length per stream
-- description: Per run, source file, rank, device and stream: the queue length summary of queue_length (changes, mean, min, quartiles, max, time-weighted mean), the one definition behind queue_length and rollup_stream_time.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- rollup: rollup_stream_time
-- columns: run_id source_file rank device stream changes mean min p25 p50 p75 max time_weighted_mean
-- rollup-filter: run_id rank
-- rollup-where: changes IS NOT NULL
-- reads: kernels
WITH a AS (
    SELECT run_id, source_file, rank, device, stream, launch_start_ns, start_ns
    FROM kernels
    WHERE launch_start_ns IS NOT NULL AND start_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
changes AS (
    SELECT run_id, source_file, rank, device, stream, launch_start_ns AS t, 1 AS d FROM a
    UNION ALL
    SELECT run_id, source_file, rank, device, stream, start_ns, -1 FROM a
),
series AS (
    -- Partitioned by run and device alone (the warehouse's partition columns, which DuckDB
    -- windows over without repartitioning): a stream's changes sum to zero, so the running
    -- sum is back at zero where the next file or stream begins.
    SELECT *,
           sum(d) OVER (PARTITION BY run_id, device ORDER BY source_file, stream, t, d
                        ROWS UNBOUNDED PRECEDING) AS queue_length,
           CASE WHEN lead(source_file) OVER w IS NOT DISTINCT FROM source_file
                     AND lead(stream) OVER w IS NOT DISTINCT FROM stream
                THEN (lead(t) OVER w) - t END AS held_ns
    FROM changes
    WINDOW w AS (PARTITION BY run_id, device ORDER BY source_file, stream, t, d)
),
levels AS (
    -- Exact percentiles by rank (linear interpolation, as quantile_cont / pandas describe),
    -- spelled with window functions so that every engine computes the same numbers: the
    -- changes leaving each queue length are counted (a few lengths per stream), so ranks
    -- lo .. hi - 1 hold that length, instead of numbering every change.
    SELECT run_id, source_file, device, stream, queue_length,
           sum(count(*)) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length)
               - count(*) AS lo,
           sum(count(*)) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length) AS hi,
           CAST(sum(count(*)) OVER (PARTITION BY run_id, source_file, device, stream) AS BIGINT) AS n
    FROM series
    GROUP BY run_id, source_file, device, stream, queue_length
),
positions AS (
    SELECT *, 0.25 * (n - 1) AS p25_pos, 0.5 * (n - 1) AS p50_pos, 0.75 * (n - 1) AS p75_pos FROM levels
),
percentiles AS (
    SELECT run_id, source_file, device, stream,
           max(CASE WHEN lo <= floor(p25_pos) AND floor(p25_pos) < hi THEN queue_length END)
               + (max(CASE WHEN lo <= ceil(p25_pos) AND ceil(p25_pos) < hi THEN queue_length END)
                  - max(CASE WHEN lo <= floor(p25_pos) AND floor(p25_pos) < hi THEN queue_length END))
                 * (max(p25_pos) - floor(max(p25_pos))) AS p25,
           max(CASE WHEN lo <= floor(p50_pos) AND floor(p50_pos) < hi THEN queue_length END)
               + (max(CASE WHEN lo <= ceil(p50_pos) AND ceil(p50_pos) < hi THEN queue_length END)
                  - max(CASE WHEN lo <= floor(p50_pos) AND floor(p50_pos) < hi THEN queue_length END))
                 * (max(p50_pos) - floor(max(p50_pos))) AS p50,
           max(CASE WHEN lo <= floor(p75_pos) AND floor(p75_pos) < hi THEN queue_length END)
               + (max(CASE WHEN lo <= ceil(p75_pos) AND ceil(p75_pos) < hi THEN queue_length END)
                  - max(CASE WHEN lo <= floor(p75_pos) AND floor(p75_pos) < hi THEN queue_length END))
                 * (max(p75_pos) - floor(max(p75_pos))) AS p75
    FROM positions
    GROUP BY run_id, source_file, device, stream
),
stats AS (
    SELECT run_id, source_file, rank, device, stream,
           count(*) AS changes,
           round(avg(queue_length), 4) AS mean,
           min(queue_length) AS min,
           max(queue_length) AS max,
           round(sum(queue_length * held_ns) / nullif(sum(held_ns), 0), 4) AS time_weighted_mean
    FROM series
    GROUP BY run_id, source_file, rank, device, stream
)
SELECT s.run_id, s.source_file, s.rank, s.device, s.stream, s.changes, s.mean, s.min, p.p25, p.p50, p.p75,
       s.max, s.time_weighted_mean
FROM stats s
JOIN percentiles p ON p.run_id = s.run_id AND p.source_file = s.source_file AND p.device = s.device
                  AND p.stream IS NOT DISTINCT FROM s.stream
