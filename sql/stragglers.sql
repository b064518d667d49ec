-- title: Stragglers
-- description: Per run and rank: how late the rank arrives at collectives and how long its steps take compared with the other ranks. Each communication kernel is matched across ranks by step, stream, name and its order among those; its lateness is its start minus the earliest rank's start (Kineto clocks are wall-clock, so ranks compare). A straggler arrives last often and late: times_last counts the collectives it started last, mean_lateness_ns averages its lateness; step_vs_mean is its mean host step time over the mean of all ranks (HTA's straggler analysis looks at the same signal: the start time of the last dominant communication kernel).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only steps <= this (NULL: to the last)
-- scope: run_id
WITH comm AS (
    SELECT run_id, rank, step, stream, name, start_ns,
           row_number() OVER (PARTITION BY run_id, rank, step, stream, name ORDER BY start_ns) AS nth
    FROM kernels
    WHERE kernel_type = 'communication' AND rank IS NOT NULL AND step IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
matched AS (
    SELECT *, start_ns - min(start_ns) OVER w AS lateness_ns,
           count(*) OVER w AS ranks_present,
           start_ns = max(start_ns) OVER w AS is_last
    FROM comm
    WINDOW w AS (PARTITION BY run_id, step, stream, name, nth)
),
per_rank_comm AS (
    SELECT run_id, rank, count(*) AS collectives,
           count(*) FILTER (is_last AND ranks_present > 1) AS times_last,
           round(avg(lateness_ns), 1) AS mean_lateness_ns,
           max(lateness_ns) AS max_lateness_ns
    FROM matched GROUP BY run_id, rank
),
per_rank_steps AS (
    SELECT run_id, rank, count(*) AS steps, avg(duration_ns) AS mean_step_ns
    FROM steps
    WHERE rank IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
    GROUP BY run_id, rank
),
ranks AS (
    SELECT run_id, rank FROM per_rank_comm UNION SELECT run_id, rank FROM per_rank_steps
)
SELECT r.run_id, r.rank, s.steps, round(s.mean_step_ns, 1) AS mean_step_ns,
       round(s.mean_step_ns / avg(s.mean_step_ns) OVER (PARTITION BY r.run_id), 4) AS step_vs_mean,
       coalesce(c.collectives, 0) AS collectives, coalesce(c.times_last, 0) AS times_last,
       c.mean_lateness_ns, c.max_lateness_ns
FROM ranks r
LEFT JOIN per_rank_steps s ON s.run_id = r.run_id AND s.rank = r.rank
LEFT JOIN per_rank_comm c ON c.run_id = r.run_id AND c.rank = r.rank
ORDER BY r.run_id, coalesce(c.times_last, 0) DESC, c.mean_lateness_ns DESC, r.rank
