-- title: Queue length
-- description: Per run, rank, device and stream: the number of GPU operations launched but not yet started (+1 at each launch call, -1 when the activity starts), summarised over its changes like Holistic Trace Analysis' get_queue_length_summary (count, mean, min, quartiles, max of the queue length after each change), plus the time-weighted mean. A launch and a start at the same nanosecond count the start first.
-- scope: run_id
-- The summary per source file and stream is the metric sql/metrics/queue_summary.sql, read
-- from its per-run rollup for whole runs, else computed from raw rows.
WITH s AS (
-- include: metrics/queue_summary.sql
)
SELECT run_id, rank, device, stream, changes, mean, min, p25, p50, p75, max, time_weighted_mean
FROM s
-- source_file: streams of two files with the same rank and device in a stable order
ORDER BY run_id, rank, device, stream, source_file
