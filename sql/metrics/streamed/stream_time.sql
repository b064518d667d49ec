-- The rollup of metrics/stream_time.sql (its declaration: header, parameters, rows), as the
-- ingest computes it: the same rows, in DuckDB only, in memory bounded however many
-- kernels one stream or device holds. metrics/idle_gaps.sql and metrics/queue_summary.sql
-- window each device's rows with PARTITION BY, which holds the whole device (queue_summary's
-- two windows over 2 n changes ran out of memory at 3 M kernels in one stream at 64 MB:
-- bench/RESULTS.md, session 15 rollmem15); here the same rows are read in the order of an
-- ORDER BY, which spills, by DuckDB's streaming windows (`OVER ()`: lag, lead, a running
-- sum), as metrics/streamed/stream_overlap.sql does. Other engines promise no such order:
-- `tracedb query --dialect` prints the declaration, never this.
-- tests/test_stream_time_memory.py checks that both give the same rows.
WITH a AS (
    SELECT run_id, source_file, rank, device, stream, start_ns, start_ns + duration_ns AS end_ns,
           launch_start_ns
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
by_stream AS (
    -- idle_gaps' window order, every device's rows in one sorted run
    SELECT * FROM a ORDER BY run_id, device, source_file, stream, start_ns, end_ns
),
gaps AS (
    -- the previous activity on the same stream of the same file (and run and device)
    SELECT *, CASE WHEN lag(run_id) OVER () IS NOT DISTINCT FROM run_id
                        AND lag(device) OVER () IS NOT DISTINCT FROM device
                        AND lag(source_file) OVER () = source_file
                        AND lag(stream) OVER () IS NOT DISTINCT FROM stream
                   THEN lag(end_ns) OVER () END AS prev_end_ns
    FROM by_stream
),
classified AS (
    -- host wait first, then kernel wait (a NULL launch or threshold: not that category)
    SELECT run_id, source_file, rank, device, stream, start_ns - prev_end_ns AS idle_ns,
           coalesce(launch_start_ns > prev_end_ns, false) AS host_wait,
           NOT coalesce(launch_start_ns > prev_end_ns, false)
               AND coalesce(start_ns - prev_end_ns < $kernel_wait_ns, false) AS kernel_wait
    FROM gaps
    WHERE prev_end_ns IS NOT NULL
),
idle AS (
    SELECT run_id, source_file, rank, device, stream,
           CAST(coalesce(sum(idle_ns) FILTER (WHERE host_wait), 0) AS BIGINT) AS host_wait_ns,
           count(*) FILTER (WHERE host_wait) AS host_wait_gaps,
           CAST(coalesce(sum(idle_ns) FILTER (WHERE kernel_wait), 0) AS BIGINT) AS kernel_wait_ns,
           count(*) FILTER (WHERE kernel_wait) AS kernel_wait_gaps,
           CAST(coalesce(sum(idle_ns) FILTER (WHERE NOT host_wait AND NOT kernel_wait), 0) AS BIGINT) AS other_ns,
           count(*) FILTER (WHERE NOT host_wait AND NOT kernel_wait) AS other_gaps
    FROM classified
    GROUP BY run_id, source_file, rank, device, stream
),
changes AS (
    -- Each activity's launch (+1) and start (-1): the kernels read once (DuckDB holds a
    -- relation read twice in memory, whole, as queue_summary's UNION ALL of two reads).
    SELECT run_id, source_file, rank, device, stream,
           CASE e.d WHEN 1 THEN launch_start_ns ELSE start_ns END AS t, e.d
    FROM kernels, (VALUES (1), (-1)) e(d)
    WHERE launch_start_ns IS NOT NULL AND start_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
by_time AS (
    -- queue_summary's window order, every device's changes in one sorted run
    SELECT * FROM changes ORDER BY run_id, device, source_file, stream, t, d
),
series AS (
    -- A stream's changes sum to zero, so the running sum needs no reset at the next
    -- stream, file, device or run.
    SELECT *,
           sum(d) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS queue_length,
           CASE WHEN lead(run_id) OVER () IS NOT DISTINCT FROM run_id
                     AND lead(device) OVER () IS NOT DISTINCT FROM device
                     AND lead(source_file) OVER () IS NOT DISTINCT FROM source_file
                     AND lead(stream) OVER () IS NOT DISTINCT FROM stream
                THEN (lead(t) OVER ()) - t END AS held_ns
    FROM by_time
),
lengths AS (
    -- `series` read once (DuckDB holds a relation read twice in memory, whole): per stream
    -- and queue length, its changes and time held; what follows reads these few rows.
    SELECT run_id, source_file, rank, device, stream, queue_length,
           count(*) AS changes,
           sum(held_ns) AS held_ns,
           sum(queue_length * held_ns) AS length_ns
    FROM series
    GROUP BY run_id, source_file, rank, device, stream, queue_length
),
levels AS (
    -- queue_summary's: the changes leaving each queue length counted, so ranks lo .. hi - 1
    -- hold that length (exact percentiles, linear interpolation).
    SELECT run_id, source_file, device, stream, queue_length,
           sum(c) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length) - c AS lo,
           sum(c) OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length) AS hi,
           CAST(sum(c) OVER (PARTITION BY run_id, source_file, device, stream) AS BIGINT) AS n
    FROM (SELECT run_id, source_file, device, stream, queue_length, CAST(sum(changes) AS BIGINT) AS c
          FROM lengths GROUP BY run_id, source_file, device, stream, queue_length)
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
           CAST(sum(changes) AS BIGINT) AS changes,
           round(sum(queue_length * changes) / sum(changes), 4) AS mean,
           min(queue_length) AS min,
           max(queue_length) AS max,
           round(sum(length_ns) / nullif(sum(held_ns), 0), 4) AS time_weighted_mean
    FROM lengths
    GROUP BY run_id, source_file, rank, device, stream
),
queue AS (
    SELECT s.run_id, s.source_file, s.rank, s.device, s.stream, s.changes, s.mean, s.min, p.p25, p.p50, p.p75,
       s.max, s.time_weighted_mean
FROM stats s
JOIN percentiles p ON p.run_id = s.run_id AND p.source_file = s.source_file AND p.device = s.device
                  AND p.stream IS NOT DISTINCT FROM s.stream
)
-- A stream with one timed activity has no gap; one without launch times has no queue: NULLs.
SELECT coalesce(i.run_id, q.run_id) AS run_id, coalesce(i.source_file, q.source_file) AS source_file,
       coalesce(i.rank, q.rank) AS rank, coalesce(i.device, q.device) AS device,
       coalesce(i.stream, q.stream) AS stream,
       i.host_wait_ns, i.host_wait_gaps, i.kernel_wait_ns, i.kernel_wait_gaps, i.other_ns, i.other_gaps,
       q.changes, q.mean, q.min, q.p25, q.p50, q.p75, q.max, q.time_weighted_mean
FROM idle i
FULL JOIN queue q
  ON q.run_id = i.run_id AND q.source_file = i.source_file AND q.rank IS NOT DISTINCT FROM i.rank
 AND q.device = i.device AND q.stream IS NOT DISTINCT FROM i.stream
