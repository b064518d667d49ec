-- The rollup of metrics/stream_overlap.sql (its declaration: header, parameters, rows), as
-- the ingest computes it: the same rows, in DuckDB only, in memory bounded however many
-- kernels one stream holds. Its windows are DuckDB's streaming ones (`OVER ()`, a running
-- aggregate, lag, lead), which read their input in the order DuckDB delivers it: here
-- straight from an ORDER BY, which spills to disk; a window with PARTITION BY or ORDER BY
-- holds its whole partition (one stream, one device) and ran out of memory at 10 M
-- kernels in one stream (bench/RESULTS.md, session 15). Other engines promise no such
-- order: `tracedb query --dialect` prints the declaration, never this.
-- tests/test_stream_overlap_memory.py checks that both give the same rows.
WITH k AS (
    -- A source without stream ids (MegEngine) counts as one stream.
    SELECT run_id, device, coalesce(stream, -1) AS stream, start_ns, start_ns + duration_ns AS end_ns
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
      AND ($kind IS NULL OR kind = $kind)
),
by_stream AS (
    -- Each stream's rows together, by start (rows alike in all five are interchangeable).
    SELECT * FROM k ORDER BY run_id, device, stream, start_ns, end_ns
),
marks AS (
    -- A stream's first and last row; the row before's end.
    SELECT run_id, device, stream, start_ns, end_ns,
           lag(run_id) OVER () IS DISTINCT FROM run_id OR lag(device) OVER () IS DISTINCT FROM device
               OR lag(stream) OVER () IS DISTINCT FROM stream AS first_of_stream,
           lead(run_id) OVER () IS DISTINCT FROM run_id OR lead(device) OVER () IS DISTINCT FROM device
               OR lead(stream) OVER () IS DISTINCT FROM stream AS last_of_stream,
           lag(end_ns) OVER () AS before_end_ns
    FROM by_stream
),
numbered AS (
    -- The stream's number in that order (1, 2, ...).
    SELECT *, sum(CAST(first_of_stream AS INTEGER)) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS g
    FROM marks
),
prev AS (
    -- prev_end_ns: the latest end of the stream's earlier rows, a running max of the
    -- rows before's ends (from the stream's second row on), each lifted by its stream's
    -- number times 2^64 so that no earlier stream's end counts (every end fits in 64
    -- bits); NULL at a stream's first row.
    SELECT run_id, device, start_ns, end_ns, last_of_stream,
           CASE WHEN NOT first_of_stream THEN CAST(
               max(CASE WHEN NOT first_of_stream THEN g * CAST(18446744073709551616 AS HUGEINT) + before_end_ns END)
                   OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               - g * CAST(18446744073709551616 AS HUGEINT) AS BIGINT) END AS prev_end_ns
    FROM numbered
),
edges AS (
    -- The declaration's edges: +1 where an island opens, -1 where the one before it
    -- closed; the stream's last island closes at its last end (edge 3 of its last row,
    -- which also counts the stream).
    SELECT p.run_id, p.device,
           CASE e.edge WHEN 1 THEN p.start_ns WHEN 2 THEN p.prev_end_ns
                       ELSE greatest(p.end_ns, coalesce(p.prev_end_ns, p.end_ns)) END AS ts_ns,
           CASE e.edge WHEN 1 THEN 1 ELSE -1 END AS delta,
           CASE e.edge WHEN 3 THEN 1 ELSE 0 END AS new_streams
    FROM prev p, (VALUES (1), (2), (3)) e(edge)
    WHERE CASE e.edge WHEN 1 THEN p.prev_end_ns IS NULL OR p.start_ns > p.prev_end_ns
                      WHEN 2 THEN p.start_ns > p.prev_end_ns
                      ELSE p.last_of_stream END
),
by_time AS (
    -- Each device's edges together, by time.
    SELECT * FROM edges ORDER BY run_id, device, ts_ns, delta, new_streams
),
segments AS (
    -- After the last edge at a time, `active` streams run until the device's next edge
    -- time. The running sum needs no reset: a device's edges sum to 0.
    SELECT run_id, device, new_streams,
           sum(CAST(delta AS HUGEINT)) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS active,
           CASE WHEN lead(run_id) OVER () IS NOT DISTINCT FROM run_id AND lead(device) OVER () IS NOT DISTINCT FROM device
                THEN nullif(lead(ts_ns) OVER () - ts_ns, 0) END AS length_ns
    FROM by_time
),
totals AS (
    -- (the last edge of a device has no length; a device with no segment has no row)
    SELECT run_id, device,
           CAST(sum(new_streams) AS BIGINT) AS streams,
           CAST(sum(CASE WHEN active >= 1 THEN length_ns ELSE 0 END) AS BIGINT) AS busy_ns,
           CAST(sum(CASE WHEN active >= 2 THEN length_ns ELSE 0 END) AS BIGINT) AS overlap_ns,
           max(CASE WHEN length_ns IS NOT NULL THEN active END) AS max_active_streams,
           sum(CASE WHEN active >= 1 THEN active * length_ns ELSE 0 END) AS stream_ns
    FROM segments
    GROUP BY run_id, device
    HAVING count(length_ns) > 0
)
SELECT
    t.run_id,
    t.device,
    t.streams,
    t.busy_ns,
    t.overlap_ns,
    round(100.0 * t.overlap_ns / nullif(t.busy_ns, 0), 2) AS overlap_pct,
    t.max_active_streams,
    round(t.stream_ns / nullif(t.busy_ns, 0), 3) AS mean_active_streams
FROM totals t
