-- The rollup of metrics/stream_time.sql (its declaration: header, parameters, rows), as the
-- ingest computes it: the same rows, in DuckDB only, in memory that grows with the bytes of
-- one sort (spilled), not with the windows of a stream. metrics/idle_gaps.sql and
-- metrics/queue_summary.sql window each device's rows with PARTITION BY, which holds the
-- whole device; here the same rows are read in the order of an ORDER BY by DuckDB's
-- streaming windows (`OVER ()`: lag, a running sum and max), as
-- metrics/streamed/stream_overlap.sql does. Other engines promise no such order:
-- `tracedb query --dialect` prints the declaration, never this.
-- What DuckDB 2.0's external sort needs: its merge pins a block of every sorted run at
-- once, and a run is as big as the memory the sort is granted, which every hash aggregate
-- of the query shrinks from the start by a reservation that grows with its row's width.
-- So: one sort of two narrow rows a kernel (idle_gaps' and queue_summary's orders agree:
-- a start is also the queue's -1), one narrow GROUP BY, and windows, not GROUP BYs or
-- joins, over its few rows (bench/RESULTS.md, session 16 rollmem16). The row before of a
-- kind (the gap row before, the change before) is the latest of a running max whose
-- values are lifted by the row's position or the stream's number; a change's time held
-- is counted at the next change, from the one before.
-- tests/test_stream_time_memory.py checks that both give the same rows.
WITH activity AS (
    -- One read of the kernels, at most two rows a timed activity: at its start (c = 0; x
    -- its end, NULL without a duration) and, with a launch time, at its launch (c = 1).
    -- Few columns: the sort below holds every row, and the more bytes, the more memory
    -- its merge needs.
    SELECT run_id, source_file, rank, device, stream, c,
           CASE c WHEN 1 THEN launch_start_ns ELSE start_ns END AS t,
           CASE c WHEN 0 THEN start_ns + duration_ns END AS x,
           CASE c WHEN 0 THEN launch_start_ns END AS launch_ns
    FROM (SELECT *, unnest(CASE WHEN launch_start_ns IS NOT NULL THEN [0, 1]
                                WHEN duration_ns IS NOT NULL THEN [0] ELSE [] END) AS c
          FROM kernels
          WHERE start_ns IS NOT NULL
            AND ($run_id IS NULL OR run_id = $run_id)
            AND ($rank IS NULL OR rank = $rank)
            AND ($step_from IS NULL OR step >= $step_from)
            AND ($step_to IS NULL OR step <= $step_to))
),
ordered AS (
    -- One sorted run: each stream's rows by time, a start before a launch at the same
    -- time (queue_summary's order: -1 before +1), starts by end (idle_gaps' order).
    SELECT * FROM activity ORDER BY run_id, device, source_file, stream, t, c, x
),
marked AS (
    -- d: the queue's change (a launch +1, the start of a launched activity -1, else 0);
    -- gap: a row of idle_gaps (start and duration known)
    SELECT *, row_number() OVER () AS pos,
           CASE WHEN c = 1 THEN 1 WHEN launch_ns IS NOT NULL THEN -1 ELSE 0 END AS d,
           c = 0 AND x IS NOT NULL AS gap,
           CAST(lag(run_id) OVER () IS DISTINCT FROM run_id OR lag(device) OVER () IS DISTINCT FROM device
                OR lag(source_file) OVER () IS DISTINCT FROM source_file
                OR lag(stream) OVER () IS DISTINCT FROM stream AS INTEGER) AS first_of_stream
    FROM ordered
),
numbered AS (
    -- The queue length after the row (a stream's changes sum to zero: no reset); the
    -- stream's number and first position; the latest gap row so far, its position and end
    -- lifted by its position times 2^64, so the max is the latest (every end fits in 64 bits).
    SELECT *,
           sum(d) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS queue_length,
           sum(first_of_stream) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS g,
           max(CASE WHEN first_of_stream = 1 THEN pos END) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               AS first_pos,
           max(CASE WHEN gap THEN pos * CAST(18446744073709551616 AS HUGEINT)
                                  + (x + CAST(9223372036854775808 AS HUGEINT)) END)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_gap,
           max(CASE WHEN gap THEN pos END) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_gap_pos
    FROM marked
),
lifted AS (
    -- the latest change's time so far, lifted by the stream's number (times within a
    -- stream only grow)
    SELECT *,
           max(CASE WHEN d <> 0 THEN g * CAST(18446744073709551616 AS HUGEINT)
                                     + (t + CAST(9223372036854775808 AS HUGEINT)) END)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_change
    FROM numbered
),
previous AS (
    -- prev_end_ns: the end of the stream's gap row before (idle_gaps' lag; none for a
    -- file NULL); prev_change_ns: the time of the stream's change before, whose queue
    -- length (this row's minus its change) was held until this change
    SELECT *,
           CASE WHEN lag(last_gap_pos) OVER () >= first_pos AND source_file IS NOT NULL
                THEN CAST(lag(last_gap) OVER () - lag(last_gap_pos) OVER () * CAST(18446744073709551616 AS HUGEINT)
                          - CAST(9223372036854775808 AS HUGEINT) AS BIGINT) END AS prev_end_ns,
           CASE WHEN lag(last_change) OVER () >= g * CAST(18446744073709551616 AS HUGEINT)
                THEN CAST(lag(last_change) OVER () - g * CAST(18446744073709551616 AS HUGEINT)
                          - CAST(9223372036854775808 AS HUGEINT) AS BIGINT) END AS prev_change_ns
    FROM lifted
),
classified AS (
    -- A gap row with a row before: its category (host wait first, then kernel wait; a
    -- NULL launch or threshold: not that category) and length. A change: its queue length
    -- counted, and the time since the change before held at that one's length.
    SELECT run_id, source_file, rank, device, stream,
           CASE role WHEN 1 THEN CASE WHEN coalesce(launch_ns > prev_end_ns, false) THEN 1
                                      WHEN coalesce(t - prev_end_ns < $kernel_wait_ns, false) THEN 2
                                      ELSE 3 END END AS category,
           CASE role WHEN 2 THEN queue_length END AS queue_length,
           CASE role WHEN 2 THEN d END AS d,
           CASE role WHEN 1 THEN t - prev_end_ns ELSE t - prev_change_ns END AS ns
    FROM (SELECT *, unnest(CASE WHEN gap AND prev_end_ns IS NOT NULL AND d <> 0 THEN [1, 2]
                                WHEN gap AND prev_end_ns IS NOT NULL THEN [1]
                                WHEN d <> 0 THEN [2] ELSE [] END) AS role
          FROM previous)
),
counted AS (
    -- per stream: its gaps' count and time by category, its changes' by queue length and change
    SELECT run_id, source_file, rank, device, stream, category, queue_length, d, count(*) AS n, sum(ns) AS ns
    FROM classified
    GROUP BY run_id, source_file, rank, device, stream, category, queue_length, d
),
grouped AS (
    -- a change's count at its queue length, the time held at the length before it
    SELECT run_id, source_file, rank, device, stream, category, q.queue_length, q.n, q.ns
    FROM (SELECT *, unnest(CASE WHEN d IS NULL THEN [{'queue_length': queue_length, 'n': n, 'ns': ns}]
                                ELSE [{'queue_length': queue_length, 'n': n, 'ns': NULL},
                                      {'queue_length': queue_length - d, 'n': 0, 'ns': ns}] END) AS q
          FROM counted)
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
