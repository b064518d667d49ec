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
    -- opens a new island of that stream.
    SELECT run_id, device, start_ns,
           max(end_ns) OVER (PARTITION BY run_id, device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM k
),
per_stream AS (
    SELECT run_id, device, stream, max(end_ns) AS last_end_ns
    FROM k
    GROUP BY run_id, device, stream
),
edges AS (
    -- Island edges straight from `prev` (no second window, no GROUP BY per island): an island
    -- opens (+1) at a row that starts after prev_end_ns; the island before it closes (-1) at
    -- that prev_end_ns (islands are disjoint, so the latest earlier end is the previous
    -- island's end); a stream's last island closes at the stream's last end.
    SELECT run_id, device, ts_ns, sum(delta) AS delta
    FROM (
        SELECT run_id, device, start_ns AS ts_ns, 1 AS delta
        FROM prev WHERE prev_end_ns IS NULL OR start_ns > prev_end_ns
        UNION ALL
        SELECT run_id, device, prev_end_ns AS ts_ns, -1 AS delta
        FROM prev WHERE start_ns > prev_end_ns
        UNION ALL
        SELECT run_id, device, last_end_ns AS ts_ns, -1 AS delta FROM per_stream
    ) e
    GROUP BY run_id, device, ts_ns
),
segments AS (
    -- Between one edge and the next, `active` streams run.
    SELECT run_id, device,
           sum(delta) OVER (PARTITION BY run_id, device ORDER BY ts_ns
                            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS active,
           lead(ts_ns) OVER (PARTITION BY run_id, device ORDER BY ts_ns) - ts_ns AS length_ns
    FROM edges
),
streams AS (
    SELECT run_id, device, count(*) AS streams
    FROM per_stream
    GROUP BY run_id, device
),
totals AS (
    SELECT run_id, device,
           CAST(sum(CASE WHEN active >= 1 THEN length_ns ELSE 0 END) AS BIGINT) AS busy_ns,
           CAST(sum(CASE WHEN active >= 2 THEN length_ns ELSE 0 END) AS BIGINT) AS overlap_ns,
           max(active) AS max_active_streams,
           sum(CASE WHEN active >= 1 THEN active * length_ns ELSE 0 END) AS stream_ns
    FROM segments
    WHERE length_ns IS NOT NULL
    GROUP BY run_id, device
)
SELECT
    t.run_id,
    t.device,
    s.streams,
    t.busy_ns,
    t.overlap_ns,
    round(100.0 * t.overlap_ns / nullif(t.busy_ns, 0), 2) AS overlap_pct,
    t.max_active_streams,
    round(t.stream_ns / nullif(t.busy_ns, 0), 3) AS mean_active_streams
FROM totals t
JOIN streams s ON s.run_id = t.run_id AND s.device = t.device
