-- title: Stream overlap
-- description: Per run and device: how long 1 or more and 2 or more GPU streams were active at once, the overlapped share of busy time, the most streams active at once and the time-weighted mean of active streams while busy (HTA / Nsight Systems stream concurrency).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- rollup: rollup_stream_overlap
-- columns: run_id device streams busy_ns overlap_ns overlap_pct max_active_streams mean_active_streams
-- rollup-filter: run_id device
-- rollup-where: kind IS NOT DISTINCT FROM $kind
-- reads: kernels
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
prev AS (
    -- Merge each stream's own intervals, so a stream counts once however its rows overlap:
    -- ordered by start, a row that starts after every earlier row of its stream has ended
    -- opens a new island of that stream. A stream's first row (no earlier end) also
    -- carries the stream's last end. (One window, and each relation read once: DuckDB
    -- spills windows and sorts to disk, not a relation that is read twice.)
    SELECT run_id, device, start_ns,
           max(end_ns) OVER (PARTITION BY run_id, device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns,
           max(end_ns) OVER (PARTITION BY run_id, device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last_end_ns
    FROM k
),
edges AS (
    -- Island edges straight from `prev` (no second window, no GROUP BY per island): an island
    -- opens (+1) at a row that starts after prev_end_ns; the island before it closes (-1) at
    -- that prev_end_ns (islands are disjoint, so the latest earlier end is the previous
    -- island's end); a stream's last island closes at the stream's last end, edge 3 of
    -- its first row, which also counts the stream.
    SELECT p.run_id, p.device,
           CASE e.edge WHEN 1 THEN p.start_ns WHEN 2 THEN p.prev_end_ns ELSE p.last_end_ns END AS ts_ns,
           sum(CASE e.edge WHEN 1 THEN 1 ELSE -1 END) AS delta,
           sum(CASE e.edge WHEN 3 THEN 1 ELSE 0 END) AS new_streams
    FROM prev p, (VALUES (1), (2), (3)) e(edge)
    WHERE CASE e.edge WHEN 1 THEN p.prev_end_ns IS NULL OR p.start_ns > p.prev_end_ns
                      WHEN 2 THEN p.start_ns > p.prev_end_ns
                      ELSE p.prev_end_ns IS NULL END
    GROUP BY 1, 2, 3
),
segments AS (
    -- Between one edge and the next, `active` streams run.
    SELECT run_id, device, new_streams,
           sum(delta) OVER (PARTITION BY run_id, device ORDER BY ts_ns
                            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS active,
           lead(ts_ns) OVER (PARTITION BY run_id, device ORDER BY ts_ns) - ts_ns AS length_ns
    FROM edges
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
