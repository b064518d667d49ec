-- title: Idle time breakdown
-- description: Per run, rank, device and stream: the gaps between consecutive activities on the stream, split into host wait (the next activity's launch call started after the previous activity ended: the CPU was late), kernel wait (a gap shorter than kernel_wait_ns: launch overhead) and other, with each category's share of the stream's idle time (Holistic Trace Analysis' get_idle_time_breakdown). HTA documents its threshold as 30 ns but compares it with microseconds, so 30 us is what it applies and the default here.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- param: kernel_wait_ns BIGINT>=0 30000 A gap shorter than this (and no host wait) is kernel wait
-- scope: run_id
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
    SELECT *, lag(end_ns) OVER (PARTITION BY run_id, source_file, device, stream
                                ORDER BY start_ns, end_ns) AS prev_end_ns
    FROM a
),
classified AS (
    SELECT run_id, rank, device, stream, start_ns - prev_end_ns AS idle_ns,
           CASE WHEN launch_start_ns > prev_end_ns THEN 'host_wait'
                WHEN start_ns - prev_end_ns < $kernel_wait_ns THEN 'kernel_wait'
                ELSE 'other' END AS category
    FROM gaps
    WHERE prev_end_ns IS NOT NULL
)
SELECT run_id, rank, device, stream, category,
       CAST(sum(idle_ns) AS BIGINT) AS idle_ns,
       count(*) AS gaps,
       round(sum(idle_ns) / sum(sum(idle_ns)) OVER (PARTITION BY run_id, rank, device, stream), 4) AS idle_ratio
FROM classified
GROUP BY run_id, rank, device, stream, category
ORDER BY run_id, rank, device, stream, category
