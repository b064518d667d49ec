-- title: Stream overlap
-- description: Per run and device: how long 1 or more and 2 or more GPU streams were active at once, the overlapped share of busy time, the most streams active at once and the time-weighted mean of active streams while busy (HTA / Nsight Systems stream concurrency).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
-- raw-if: step_from step_to
-- Whole runs: the per-run rollup, which the ingest computes from each run's own rows with
-- the metric's one definition (tracedb.rollups), once per kind. A step range is not a sum of
-- per-step figures (activity of different steps overlaps), so it computes from the raw
-- rows with that same definition, included below (DuckDB drops the branch it does not need).
WITH raw AS (
-- include: metrics/stream_overlap.sql
)
SELECT run_id, device, streams, busy_ns, overlap_ns, overlap_pct, max_active_streams, mean_active_streams
FROM rollup_stream_overlap
WHERE $step_from IS NULL AND $step_to IS NULL
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
  AND kind IS NOT DISTINCT FROM $kind
UNION ALL
SELECT run_id, device, streams, busy_ns, overlap_ns, overlap_pct, max_active_streams, mean_active_streams
FROM raw
WHERE $step_from IS NOT NULL OR $step_to IS NOT NULL
ORDER BY run_id, device
