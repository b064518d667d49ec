-- title: GPU busy and idle time
-- description: Per run, rank, device and step window (each rank's windows apart; rank NULL: a trace without rank information): busy time (the union of GPU activity intervals across all streams, so concurrent kernels count once), the window's span, idle = span - busy, and the busy share (HTA temporal breakdown / XProf GPU idle time). A step's window on a device runs from the first start of the activity launched in that step to the next step's window (the last one to the device's last end), so windows tile the device timeline even when the GPU runs behind the CPU; activity is attributed to windows by time (clipped at their edges), so busy + idle = span in every window. device_step_ns is the device step time: the step's first activity to the next step's first activity (the last step: to its last end), i.e. the window's span. A device whose activity has no steps is one window (step NULL).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- param: step_from BIGINT NULL Only windows of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only windows of steps <= this (NULL: to the last)
-- rollup: rollup_gpu_busy_idle
-- columns: run_id rank device step activities activity_ns start_ns end_ns span_ns busy_ns idle_ns busy_pct busy_intervals device_step_ns
-- rollup-filter: run_id device
-- rollup-where: kind IS NOT DISTINCT FROM $kind
-- rollup-where: $step_from IS NULL OR step >= $step_from
-- rollup-where: $step_to IS NULL OR step <= $step_to
-- reads: kernels
WITH k AS (
    SELECT run_id, rank, device, step, start_ns, start_ns + duration_ns AS end_ns
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($kind IS NULL OR kind = $kind)
),
dev AS (
    SELECT run_id, rank, device, max(end_ns) AS last_end_ns, count(step) AS with_step
    FROM k GROUP BY run_id, rank, device
),
firsts AS (
    -- each step's first activity start on the device (steps without any: no window)
    SELECT k.run_id, k.rank, k.device, k.step, min(k.start_ns) AS start_ns
    FROM k JOIN dev ON dev.run_id = k.run_id AND dev.rank IS NOT DISTINCT FROM k.rank AND dev.device = k.device
    WHERE k.step IS NOT NULL OR dev.with_step = 0
    GROUP BY k.run_id, k.rank, k.device, k.step
),
windows AS (
    SELECT f.run_id, f.rank, f.device, f.step, f.start_ns,
           coalesce(lead(f.start_ns) OVER (PARTITION BY f.run_id, f.rank, f.device ORDER BY f.start_ns, f.step),
                    d.last_end_ns) AS end_ns
    FROM firsts f JOIN dev d ON d.run_id = f.run_id AND d.rank IS NOT DISTINCT FROM f.rank AND d.device = f.device
),
clipped AS (
    SELECT w.run_id, w.rank, w.device, w.step, w.start_ns AS w_start, w.end_ns AS w_end,
           greatest(k.start_ns, w.start_ns) AS start_ns, least(k.end_ns, w.end_ns) AS end_ns
    FROM windows w
    JOIN k ON k.run_id = w.run_id AND k.rank IS NOT DISTINCT FROM w.rank AND k.device = w.device
          AND k.start_ns < w.end_ns AND k.end_ns > w.start_ns
    WHERE ($step_from IS NULL OR w.step >= $step_from)
      AND ($step_to IS NULL OR w.step <= $step_to)
),
prev AS (
    -- Latest end among the intervals that start earlier: a start after it opens a new busy island.
    SELECT *,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, step ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM clipped
),
islands AS (
    -- The busy union without numbering islands (a second window) and grouping by them: an
    -- island opens at a row starting after prev_end_ns, the island before it closes at that
    -- prev_end_ns (islands are disjoint, so the latest earlier end is the previous island's
    -- end), and the last island closes at the window's last end.
    SELECT run_id, rank, device, step, w_start, w_end,
           count(*) AS activities,
           sum(end_ns - start_ns) AS activity_ns,
           count(CASE WHEN prev_end_ns IS NULL OR start_ns > prev_end_ns THEN 1 END) AS busy_intervals,
           max(end_ns) + sum(CASE WHEN start_ns > prev_end_ns THEN prev_end_ns - start_ns
                                  WHEN prev_end_ns IS NULL THEN 0 - start_ns
                                  ELSE 0 END) AS busy_ns
    FROM prev
    GROUP BY run_id, rank, device, step, w_start, w_end
)
SELECT
    run_id,
    rank,
    device,
    step,
    CAST(activities AS BIGINT) AS activities,
    CAST(activity_ns AS BIGINT) AS activity_ns,
    w_start AS start_ns,
    w_end AS end_ns,
    w_end - w_start AS span_ns,
    CAST(busy_ns AS BIGINT) AS busy_ns,
    CAST(w_end - w_start - busy_ns AS BIGINT) AS idle_ns,
    round(100.0 * busy_ns / nullif(w_end - w_start, 0), 2) AS busy_pct,
    busy_intervals,
    CASE WHEN step IS NOT NULL THEN w_end - w_start END AS device_step_ns
FROM islands
