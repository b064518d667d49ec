-- title: Queue length
-- description: Per run, rank, device and stream: the number of GPU operations launched but not yet started (+1 at each launch call, -1 when the activity starts), summarised over its changes like Holistic Trace Analysis' get_queue_length_summary (count, mean, min, quartiles, max of the queue length after each change), plus the time-weighted mean. A launch and a start at the same nanosecond count the start first.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
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
    SELECT *,
           sum(d) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY t, d
                        ROWS UNBOUNDED PRECEDING) AS queue_length,
           lead(t) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY t, d) - t AS held_ns
    FROM changes
),
ranked AS (
    -- Exact percentiles by rank (linear interpolation, as quantile_cont / pandas describe),
    -- spelled with window functions so that every engine computes the same numbers.
    SELECT *,
           row_number() OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length) - 1 AS r,
           0.25 * (count(*) OVER (PARTITION BY run_id, source_file, device, stream) - 1) AS p25_pos,
           0.5 * (count(*) OVER (PARTITION BY run_id, source_file, device, stream) - 1) AS p50_pos,
           0.75 * (count(*) OVER (PARTITION BY run_id, source_file, device, stream) - 1) AS p75_pos
    FROM series
)
SELECT run_id, rank, device, stream,
       count(*) AS changes,
       round(avg(queue_length), 4) AS mean,
       min(queue_length) AS min,
       max(CASE WHEN r = floor(p25_pos) THEN queue_length END)
           + (max(CASE WHEN r = ceil(p25_pos) THEN queue_length END) - max(CASE WHEN r = floor(p25_pos) THEN queue_length END))
             * (max(p25_pos) - floor(max(p25_pos))) AS p25,
       max(CASE WHEN r = floor(p50_pos) THEN queue_length END)
           + (max(CASE WHEN r = ceil(p50_pos) THEN queue_length END) - max(CASE WHEN r = floor(p50_pos) THEN queue_length END))
             * (max(p50_pos) - floor(max(p50_pos))) AS p50,
       max(CASE WHEN r = floor(p75_pos) THEN queue_length END)
           + (max(CASE WHEN r = ceil(p75_pos) THEN queue_length END) - max(CASE WHEN r = floor(p75_pos) THEN queue_length END))
             * (max(p75_pos) - floor(max(p75_pos))) AS p75,
       max(queue_length) AS max,
       round(sum(queue_length * held_ns) / nullif(sum(held_ns), 0), 4) AS time_weighted_mean
FROM ranked
GROUP BY run_id, source_file, rank, device, stream
ORDER BY run_id, rank, device, stream
