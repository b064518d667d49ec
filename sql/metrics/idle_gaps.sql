-- title: Idle gaps per stream
-- description: Per run, source file, rank, device and stream: the gaps between consecutive activities on the stream, summed and counted per category: host wait (the next activity's launch call started after the previous activity ended), kernel wait (a gap shorter than kernel_wait_ns) and other. The one definition behind idle_time_breakdown (which adds the files of a stream up) and rollup_stream_time.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- param: kernel_wait_ns BIGINT>=0 30000 A gap shorter than this (and no host wait) is kernel wait
-- rollup: rollup_stream_time
-- columns: run_id source_file rank device stream host_wait_ns host_wait_gaps kernel_wait_ns kernel_wait_gaps other_ns other_gaps
-- rollup-filter: run_id rank
-- rollup-where: host_wait_gaps IS NOT NULL
-- reads: kernels
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
gaps AS (
    -- the previous activity on the same stream of the same file; the window is partitioned
    -- by run and device alone (the warehouse's partition columns: 2-3x less CPU than four
    -- keys) and the file and stream compared with the previous row's instead
    SELECT *, CASE WHEN lag(source_file) OVER w = source_file
                        AND lag(stream) OVER w IS NOT DISTINCT FROM stream
                   THEN lag(end_ns) OVER w END AS prev_end_ns
    FROM a
    WINDOW w AS (PARTITION BY run_id, device ORDER BY source_file, stream, start_ns, end_ns)
),
classified AS (
    -- host wait first, then kernel wait (a NULL launch or threshold: not that category)
    SELECT run_id, source_file, rank, device, stream, start_ns - prev_end_ns AS idle_ns,
           coalesce(launch_start_ns > prev_end_ns, false) AS host_wait,
           NOT coalesce(launch_start_ns > prev_end_ns, false)
               AND coalesce(start_ns - prev_end_ns < $kernel_wait_ns, false) AS kernel_wait
    FROM gaps
    WHERE prev_end_ns IS NOT NULL
)
SELECT run_id, source_file, rank, device, stream,
       CAST(coalesce(sum(idle_ns) FILTER (WHERE host_wait), 0) AS BIGINT) AS host_wait_ns,
       count(*) FILTER (WHERE host_wait) AS host_wait_gaps,
       CAST(coalesce(sum(idle_ns) FILTER (WHERE kernel_wait), 0) AS BIGINT) AS kernel_wait_ns,
       count(*) FILTER (WHERE kernel_wait) AS kernel_wait_gaps,
       CAST(coalesce(sum(idle_ns) FILTER (WHERE NOT host_wait AND NOT kernel_wait), 0) AS BIGINT) AS other_ns,
       count(*) FILTER (WHERE NOT host_wait AND NOT kernel_wait) AS other_gaps
FROM classified
GROUP BY run_id, source_file, rank, device, stream
