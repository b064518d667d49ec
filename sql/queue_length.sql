-- title: Queue length
-- description: Per run, rank, device and stream: the number of GPU operations launched but not yet started (+1 at each launch call, -1 when the activity starts), summarised over its changes like Holistic Trace Analysis' get_queue_length_summary (count, mean, min, quartiles, max of the queue length after each change), plus the time-weighted mean. A launch and a start at the same nanosecond count the start first.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: step_from step_to
-- Whole runs: the per-run rollup (tracedb.rollups), one row per source file and stream
-- with the summary the ingest computed from the run's own rows with the metric's one
-- definition (metrics/queue_summary.sql: a stream's queue depends on that run alone; a rank
-- is a file's, so the rank filter keeps or drops whole rows). Step ranges compute from the
-- raw rows with that same definition (DuckDB drops the branch it does not need).
-- 1,000 runs (10.4 M kernel rows): 1.31 s from raw rows; see tracedb.rollups for the rollup.
WITH raw AS (
-- include: metrics/queue_summary.sql
)
SELECT run_id, rank, device, stream, changes, mean, min, p25, p50, p75, max, time_weighted_mean
FROM (
    SELECT run_id, source_file, rank, device, stream, changes, mean, min, p25, p50, p75, max, time_weighted_mean
    FROM rollup_stream_time
    WHERE $step_from IS NULL AND $step_to IS NULL AND changes IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($rank IS NULL OR rank = $rank)
    UNION ALL
    SELECT run_id, source_file, rank, device, stream, changes, mean, min, p25, p50, p75, max, time_weighted_mean
    FROM raw
    WHERE $step_from IS NOT NULL OR $step_to IS NOT NULL
) s
-- source_file: streams of two files with the same rank and device in a stable order
ORDER BY run_id, rank, device, stream, source_file
