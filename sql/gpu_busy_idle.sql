-- title: GPU busy and idle time
-- description: Per run, rank, device and step window (each rank's windows apart; rank NULL: a trace without rank information): busy time (the union of GPU activity intervals across all streams, so concurrent kernels count once), the window's span, idle = span - busy, and the busy share (HTA temporal breakdown / XProf GPU idle time). A step's window on a device runs from the first start of the activity launched in that step to the next step's window (the last one to the device's last end), so windows tile the device timeline even when the GPU runs behind the CPU; activity is attributed to windows by time (clipped at their edges), so busy + idle = span in every window. device_step_ns is the device step time: the step's first activity to the next step's first activity (the last step: to its last end), i.e. the window's span. A device whose activity has no steps is one window (step NULL).
-- scope: run_id
-- The metric sql/metrics/gpu_busy_idle.sql, whose per-run rollup holds every window of
-- every kind: each parameter is a filter on it, so it is always read from there.
WITH busy_idle AS (
-- include: metrics/gpu_busy_idle.sql
)
SELECT run_id, rank, device, step, activities, activity_ns, start_ns, end_ns, span_ns,
       busy_ns, idle_ns, busy_pct, busy_intervals, device_step_ns
FROM busy_idle
ORDER BY run_id, rank NULLS LAST, device, step NULLS LAST
