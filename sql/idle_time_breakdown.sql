-- title: Idle time breakdown
-- description: Per run, rank, device and stream: the gaps between consecutive activities on the stream, split into host wait (the next activity's launch call started after the previous activity ended: the CPU was late), kernel wait (a gap shorter than kernel_wait_ns: launch overhead) and other, with each category's share of the stream's idle time (Holistic Trace Analysis' get_idle_time_breakdown). HTA documents its threshold as 30 ns but compares it with microseconds, so 30 us is what it applies and the default here.
-- scope: run_id
-- Each category's summed gaps and their count per source file and stream are the metric
-- sql/metrics/idle_gaps.sql, read from its per-run rollup where its header says the rollup
-- serves the values (whole runs at the default kernel_wait_ns), else computed from raw rows;
-- this adds a stream's files up and takes the shares.
WITH streams AS (
-- include: metrics/idle_gaps.sql
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
