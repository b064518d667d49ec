-- title: Stream overlap
-- description: Per run and device: how long 1 or more and 2 or more GPU streams were active at once, the overlapped share of busy time, the most streams active at once and the time-weighted mean of active streams while busy (HTA / Nsight Systems stream concurrency).
-- scope: run_id
-- The metric sql/metrics/stream_overlap.sql: whole runs read its per-run rollup (once per
-- kind); a step range is not a sum of per-step figures (activity of different steps
-- overlaps), so it computes from raw rows.
WITH overlap AS (
-- include: metrics/stream_overlap.sql
)
SELECT run_id, device, streams, busy_ns, overlap_ns, overlap_pct, max_active_streams, mean_active_streams
FROM overlap
ORDER BY run_id, device
