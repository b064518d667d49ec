-- title: Communication-computation overlap
-- description: Per run, rank and device: time the GPU spends in communication kernels (interval union), how much of it overlaps computation kernels (union of both), and that share in percent, as Holistic Trace Analysis' get_comm_comp_overlap (kernel_type from the name rules in tracedb/kernel_types.py; copies and sets count as neither).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity of steps <= this (NULL: to the last)
-- scope: run_id
WITH k AS (
    SELECT run_id, rank, device, kernel_type, start_ns AS s, start_ns + duration_ns AS e
    FROM kernels
    WHERE kind = 'kernel' AND kernel_type IN ('communication', 'computation')
      AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
marked AS (
    -- an interval opens a new island when it starts after every earlier one of its type ended
    SELECT *, CASE WHEN s > max(e) OVER (PARTITION BY run_id, rank, device, kernel_type ORDER BY s, e
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                   THEN 1 ELSE 0 END AS opens
    FROM k
),
numbered AS (
    SELECT *, sum(opens) OVER (PARTITION BY run_id, rank, device, kernel_type ORDER BY s, e
                               ROWS UNBOUNDED PRECEDING) AS island
    FROM marked
),
islands AS (
    SELECT run_id, rank, device, kernel_type, min(s) AS s, max(e) AS e
    FROM numbered
    GROUP BY run_id, rank, device, kernel_type, island
),
comm AS (SELECT * FROM islands WHERE kernel_type = 'communication'),
comp AS (SELECT * FROM islands WHERE kernel_type = 'computation'),
overlap AS (
    SELECT c.run_id, c.rank, c.device, sum(least(c.e, p.e) - greatest(c.s, p.s)) AS overlap_ns
    FROM comm c JOIN comp p
      ON p.run_id = c.run_id AND p.rank IS NOT DISTINCT FROM c.rank AND p.device = c.device
     AND p.s < c.e AND c.s < p.e
    GROUP BY c.run_id, c.rank, c.device
),
totals AS (
    SELECT run_id, rank, device, sum(e - s) AS comm_ns FROM comm GROUP BY run_id, rank, device
)
SELECT t.run_id, t.rank, t.device,
       CAST(t.comm_ns AS BIGINT) AS comm_ns,
       CAST(coalesce(o.overlap_ns, 0) AS BIGINT) AS overlap_ns,
       round(100.0 * coalesce(o.overlap_ns, 0) / t.comm_ns, 2) AS overlap_pct
FROM totals t
LEFT JOIN overlap o ON o.run_id = t.run_id AND o.rank IS NOT DISTINCT FROM t.rank AND o.device = t.device
ORDER BY t.run_id, t.rank, t.device
