-- title: Stream time
-- description: Per run, source file, rank, device and stream: the idle gaps per category (metrics/idle_gaps.sql) and the queue length summary (metrics/queue_summary.sql) side by side; what rollup_stream_time stores for each run at the default parameters (idle_time_breakdown and queue_length read it).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- param: kernel_wait_ns BIGINT>=0 30000 A gap shorter than this (and no host wait) is kernel wait
-- rollup: rollup_stream_time
-- columns: run_id source_file rank device stream host_wait_ns host_wait_gaps kernel_wait_ns kernel_wait_gaps other_ns other_gaps changes mean min p25 p50 p75 max time_weighted_mean
-- rollup-filter: run_id rank
-- reads: kernels
-- rollup-sql: metrics/streamed/stream_time.sql
-- (The ingest computes this metric's rollup with metrics/streamed/stream_time.sql: the same
-- rows, DuckDB only, in memory bounded whatever one stream's size; tests/test_stream_time_memory.py.)
WITH idle AS (
-- include: metrics/idle_gaps.sql
),
queue AS (
-- include: metrics/queue_summary.sql
)
-- A stream with one timed activity has no gap; one without launch times has no queue: NULLs.
SELECT coalesce(i.run_id, q.run_id) AS run_id, coalesce(i.source_file, q.source_file) AS source_file,
       coalesce(i.rank, q.rank) AS rank, coalesce(i.device, q.device) AS device,
       coalesce(i.stream, q.stream) AS stream,
       i.host_wait_ns, i.host_wait_gaps, i.kernel_wait_ns, i.kernel_wait_gaps, i.other_ns, i.other_gaps,
       q.changes, q.mean, q.min, q.p25, q.p50, q.p75, q.max, q.time_weighted_mean
FROM idle i
FULL JOIN queue q
  ON q.run_id = i.run_id AND q.source_file = i.source_file AND q.rank IS NOT DISTINCT FROM i.rank
 AND q.device = i.device AND q.stream IS NOT DISTINCT FROM i.stream
