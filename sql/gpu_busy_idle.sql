-- title: GPU busy and idle time
-- description: Per run, rank, device and step window (each rank's windows apart; rank NULL: a trace without rank information): busy time (the union of GPU activity intervals across all streams, so concurrent kernels count once), the window's span, idle = span - busy, and the busy share (HTA temporal breakdown / XProf GPU idle time). A step's window on a device runs from the first start of the activity launched in that step to the next step's window (the last one to the device's last end), so windows tile the device timeline even when the GPU runs behind the CPU; activity is attributed to windows by time (clipped at their edges), so busy + idle = span in every window. device_step_ns is the device step time: the step's first activity to the next step's first activity (the last step: to its last end), i.e. the window's span. A device whose activity has no steps is one window (step NULL).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: step_from BIGINT NULL Only windows of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only windows of steps <= this (NULL: to the last)
-- scope: run_id
-- Fleet-wide, this would order every activity row (13.7 s at 9.6 M kernel rows): it reads
-- the per-run rollup instead, which the ingest computes from each run's own rows with the
-- metric's one definition, sql/metrics/gpu_busy_idle.sql (tracedb.rollups). Every window
-- of every kind is there, so each parameter is a filter on it.
SELECT run_id, rank, device, step, activities, activity_ns, start_ns, end_ns, span_ns,
       busy_ns, idle_ns, busy_pct, busy_intervals, device_step_ns
FROM rollup_gpu_busy_idle
WHERE ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
  AND kind IS NOT DISTINCT FROM $kind
  AND ($step_from IS NULL OR step >= $step_from)
  AND ($step_to IS NULL OR step <= $step_to)
ORDER BY run_id, rank NULLS LAST, device, step NULLS LAST
