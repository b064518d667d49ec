-- The rollup of metrics/stream_time.sql (its declaration: header, parameters, rows), as the
-- ingest computes it: the same rows, in DuckDB only, in memory that grows with the bytes of
-- one sort, not with the windows of a stream. metrics/idle_gaps.sql and
-- metrics/queue_summary.sql window each device's rows with PARTITION BY, which holds the
-- whole device; here the same rows are read in the order of an ORDER BY, which spills, by
-- DuckDB's streaming windows (`OVER ()`: lag, lead, a running sum), as
-- metrics/streamed/stream_overlap.sql does. Other engines promise no such order:
-- `tracedb query --dialect` prints the declaration, never this.
-- What DuckDB 2.0's external sort needs: its merge pins a block of every sorted run at
-- once, and a run is as big as the memory the sort is granted, which every hash aggregate
-- of the query shrinks, from the start, by a reservation that grows with its row's width.
-- So: one sort (the kernels read once, few columns), one narrow GROUP BY, and windows, not
-- GROUP BYs or joins, over its few rows (bench/RESULTS.md, session 16 rollmem16).
-- tests/test_stream_time_memory.py checks that both give the same rows.
WITH activity AS (
    -- One read of the kernels, three rows a timed activity: its idle row (start and
    -- duration known: `queue` false, x its end) and its launch (+1) and start (-1) for the
    -- queue (launch and start known: `queue` true, x the change). Few columns: the sort
    -- below holds every row, and the more bytes a row, the more memory its merge needs.
    SELECT run_id, source_file, rank, device, stream, e.d <> 0 AS queue,
           CASE e.d WHEN 1 THEN launch_start_ns ELSE start_ns END AS t,
           CASE e.d WHEN 0 THEN start_ns + duration_ns ELSE e.d END AS x,
           CASE e.d WHEN 0 THEN launch_start_ns END AS launch_ns
    FROM kernels, (VALUES (0), (1), (-1)) e(d)
    WHERE start_ns IS NOT NULL
      AND CASE WHEN e.d = 0 THEN duration_ns IS NOT NULL ELSE launch_start_ns IS NOT NULL END
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
ordered AS (
    -- One sorted run: each stream's idle rows by start and end (idle_gaps' window order),
    -- then its queue changes by time and change (queue_summary's).
    SELECT * FROM activity ORDER BY run_id, device, source_file, stream, queue, t, x
),
series AS (
    -- The row before on the same stream (for a gap) and the row after (for the time a
    -- queue length is held); the queue length a running sum: a stream's changes sum to
    -- zero and its idle rows count 0, so it needs no reset at the next stream.
    SELECT *,
           CASE WHEN NOT queue AND NOT lag(queue) OVER ()
                     AND lag(run_id) OVER () IS NOT DISTINCT FROM run_id
                     AND lag(device) OVER () IS NOT DISTINCT FROM device
                     AND lag(source_file) OVER () = source_file
                     AND lag(stream) OVER () IS NOT DISTINCT FROM stream
                THEN lag(x) OVER () END AS prev_end_ns,
           sum(CASE WHEN queue THEN CAST(x AS INTEGER) ELSE 0 END)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running,
           CASE WHEN queue AND lead(run_id) OVER () IS NOT DISTINCT FROM run_id
                     AND lead(device) OVER () IS NOT DISTINCT FROM device
                     AND lead(source_file) OVER () IS NOT DISTINCT FROM source_file
                     AND lead(stream) OVER () IS NOT DISTINCT FROM stream
                THEN (lead(t) OVER ()) - t END AS held_ns
    FROM ordered
),
classified AS (
    -- a gap's category (host wait first, then kernel wait; a NULL launch or threshold: not
    -- that category) and length, or a change's queue length and time held
    SELECT run_id, source_file, rank, device, stream,
           CASE WHEN queue THEN running END AS queue_length,
           CASE WHEN queue THEN NULL
                WHEN coalesce(launch_ns > prev_end_ns, false) THEN 1
                WHEN coalesce(t - prev_end_ns < $kernel_wait_ns, false) THEN 2
                ELSE 3 END AS category,
           CASE WHEN queue THEN held_ns ELSE t - prev_end_ns END AS ns
    FROM series
    WHERE queue OR prev_end_ns IS NOT NULL
),
grouped AS (
    -- per stream: its gaps' count and time by category and its changes' by queue length
    -- (few columns: DuckDB reserves a hash aggregate's memory by its row's width)
    SELECT run_id, source_file, rank, device, stream, category, queue_length, count(*) AS n, sum(ns) AS ns
    FROM classified
    GROUP BY run_id, source_file, rank, device, stream, category, queue_length
),
ranked AS (
    -- queue_summary's levels: the changes leaving each queue length counted (over the
    -- stream's ranks), so ranks lo .. hi - 1 hold that length (exact percentiles, linear
    -- interpolation). From here on windows over these few rows, not GROUP BYs or joins
    -- (see the top).
    SELECT *,
           sum(n) FILTER (WHERE queue_length IS NOT NULL)
               OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length)
             - sum(n) FILTER (WHERE queue_length IS NOT NULL)
               OVER (PARTITION BY run_id, source_file, device, stream, queue_length) AS lo,
           sum(n) FILTER (WHERE queue_length IS NOT NULL)
               OVER (PARTITION BY run_id, source_file, device, stream ORDER BY queue_length) AS hi,
           CAST(sum(n) FILTER (WHERE queue_length IS NOT NULL)
               OVER (PARTITION BY run_id, source_file, device, stream) AS BIGINT) AS total
    FROM grouped
),
positions AS (
    SELECT *, 0.25 * (total - 1) AS p25_pos, 0.5 * (total - 1) AS p50_pos, 0.75 * (total - 1) AS p75_pos
    FROM ranked
),
summed AS (
    SELECT run_id, source_file, rank, device, stream,
           count(*) FILTER (WHERE category IS NOT NULL) OVER s AS gap_rows,
           CAST(coalesce(sum(ns) FILTER (WHERE category = 1) OVER s, 0) AS BIGINT) AS host_wait_ns,
           CAST(coalesce(sum(n) FILTER (WHERE category = 1) OVER s, 0) AS BIGINT) AS host_wait_gaps,
           CAST(coalesce(sum(ns) FILTER (WHERE category = 2) OVER s, 0) AS BIGINT) AS kernel_wait_ns,
           CAST(coalesce(sum(n) FILTER (WHERE category = 2) OVER s, 0) AS BIGINT) AS kernel_wait_gaps,
           CAST(coalesce(sum(ns) FILTER (WHERE category = 3) OVER s, 0) AS BIGINT) AS other_ns,
           CAST(coalesce(sum(n) FILTER (WHERE category = 3) OVER s, 0) AS BIGINT) AS other_gaps,
           CAST(sum(n) FILTER (WHERE queue_length IS NOT NULL) OVER s AS BIGINT) AS changes,
           round(sum(queue_length * n) OVER s / sum(n) FILTER (WHERE queue_length IS NOT NULL) OVER s, 4) AS mean,
           min(queue_length) OVER s AS min,
           max(queue_length) OVER s AS max,
           round(sum(queue_length * ns) OVER s / nullif(sum(ns) FILTER (WHERE queue_length IS NOT NULL) OVER s, 0), 4)
               AS time_weighted_mean,
           max(CASE WHEN lo <= floor(p25_pos) AND floor(p25_pos) < hi THEN queue_length END) OVER p
               + (max(CASE WHEN lo <= ceil(p25_pos) AND ceil(p25_pos) < hi THEN queue_length END) OVER p
                  - max(CASE WHEN lo <= floor(p25_pos) AND floor(p25_pos) < hi THEN queue_length END) OVER p)
                 * (max(p25_pos) OVER p - floor(max(p25_pos) OVER p)) AS p25,
           max(CASE WHEN lo <= floor(p50_pos) AND floor(p50_pos) < hi THEN queue_length END) OVER p
               + (max(CASE WHEN lo <= ceil(p50_pos) AND ceil(p50_pos) < hi THEN queue_length END) OVER p
                  - max(CASE WHEN lo <= floor(p50_pos) AND floor(p50_pos) < hi THEN queue_length END) OVER p)
                 * (max(p50_pos) OVER p - floor(max(p50_pos) OVER p)) AS p50,
           max(CASE WHEN lo <= floor(p75_pos) AND floor(p75_pos) < hi THEN queue_length END) OVER p
               + (max(CASE WHEN lo <= ceil(p75_pos) AND ceil(p75_pos) < hi THEN queue_length END) OVER p
                  - max(CASE WHEN lo <= floor(p75_pos) AND floor(p75_pos) < hi THEN queue_length END) OVER p)
                 * (max(p75_pos) OVER p - floor(max(p75_pos) OVER p)) AS p75,
           row_number() OVER s AS nth
    FROM positions
    WINDOW s AS (PARTITION BY run_id, source_file, rank, device, stream),
           p AS (PARTITION BY run_id, source_file, device, stream)
)
-- A stream with one timed activity has no gap; one without launch times has no queue:
-- NULLs (and no queue where the run, file or device is NULL: queue_summary's joins).
SELECT run_id, source_file, rank, device, stream,
       CASE WHEN gapped THEN host_wait_ns END AS host_wait_ns,
       CASE WHEN gapped THEN host_wait_gaps END AS host_wait_gaps,
       CASE WHEN gapped THEN kernel_wait_ns END AS kernel_wait_ns,
       CASE WHEN gapped THEN kernel_wait_gaps END AS kernel_wait_gaps,
       CASE WHEN gapped THEN other_ns END AS other_ns,
       CASE WHEN gapped THEN other_gaps END AS other_gaps,
       CASE WHEN queued THEN changes END AS changes,
       CASE WHEN queued THEN mean END AS mean,
       CASE WHEN queued THEN min END AS min,
       CASE WHEN queued THEN p25 END AS p25,
       CASE WHEN queued THEN p50 END AS p50,
       CASE WHEN queued THEN p75 END AS p75,
       CASE WHEN queued THEN max END AS max,
       CASE WHEN queued THEN time_weighted_mean END AS time_weighted_mean
FROM (SELECT *, gap_rows > 0 AS gapped,
             changes IS NOT NULL AND run_id IS NOT NULL AND source_file IS NOT NULL AND device IS NOT NULL AS queued
      FROM summed
      WHERE nth = 1)
WHERE gapped OR queued
