-- title: Idle time breakdown
-- description: Per run, rank, device and stream: the gaps between consecutive activities on the stream, split into host wait (the next activity's launch call started after the previous activity ended: the CPU was late), kernel wait (a gap shorter than kernel_wait_ns: launch overhead) and other, with each category's share of the stream's idle time (Holistic Trace Analysis' get_idle_time_breakdown). HTA documents its threshold as 30 ns but compares it with microseconds, so 30 us is what it applies and the default here.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- param: kernel_wait_ns BIGINT>=0 30000 A gap shorter than this (and no host wait) is kernel wait
-- scope: run_id
-- raw-if: step_from step_to kernel_wait_ns
-- Whole runs at the default kernel_wait_ns: the per-run rollup (tracedb.rollups), whose
-- rows per source file and stream hold each category's summed gaps and their count, as
-- the ingest computed them from the run's own rows with the metric's one definition
-- (metrics/idle_gaps.sql: a stream's gaps depend on that run alone; a rank is a file's, so
-- the rank filter keeps or drops whole rows). Step ranges and another threshold compute
-- from the raw rows with that same definition (DuckDB drops the branch it does not need).
-- 1,000 runs (10.4 M kernel rows): 2.4 s from raw rows; see tracedb.rollups for the rollup.
WITH raw AS (
-- include: metrics/idle_gaps.sql
),
streams AS (
    SELECT run_id, rank, device, stream, host_wait_ns, host_wait_gaps, kernel_wait_ns, kernel_wait_gaps,
           other_ns, other_gaps
    FROM rollup_stream_time
    WHERE $step_from IS NULL AND $step_to IS NULL AND $kernel_wait_ns = 30000
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
    UNION ALL
    SELECT run_id, rank, device, stream, host_wait_ns, host_wait_gaps, kernel_wait_ns, kernel_wait_gaps,
           other_ns, other_gaps
    FROM raw
    WHERE $step_from IS NOT NULL OR $step_to IS NOT NULL OR $kernel_wait_ns IS DISTINCT FROM 30000
),
categories AS (
    SELECT run_id, rank, device, stream, 'host_wait' AS category, host_wait_ns AS idle_ns, host_wait_gaps AS gaps FROM streams
    UNION ALL
    SELECT run_id, rank, device, stream, 'kernel_wait', kernel_wait_ns, kernel_wait_gaps FROM streams
    UNION ALL
    SELECT run_id, rank, device, stream, 'other', other_ns, other_gaps FROM streams
)
SELECT run_id, rank, device, stream, category,
       CAST(sum(idle_ns) AS BIGINT) AS idle_ns,
       CAST(sum(gaps) AS BIGINT) AS gaps,
       round(sum(idle_ns) / sum(sum(idle_ns)) OVER (PARTITION BY run_id, rank, device, stream), 4) AS idle_ratio
FROM categories
WHERE gaps > 0
GROUP BY run_id, rank, device, stream, category
ORDER BY run_id, rank, device, stream, category
