-- title: Communication-computation overlap
-- description: Per run, rank and device: time the GPU spends in communication kernels (interval union), how much of it overlaps computation kernels (union of both), and that share in percent, as Holistic Trace Analysis' get_comm_comp_overlap (kernel_type from the name rules in tracedb/kernel_types.py; copies and sets count as neither).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity of steps <= this (NULL: to the last)
-- scope: run_id
WITH k AS NOT MATERIALIZED (
    SELECT run_id, rank, device, kernel_type = 'communication' AS comm,
           start_ns AS s, start_ns + duration_ns AS e
    FROM kernels
    WHERE kind = 'kernel' AND kernel_type IN ('communication', 'computation')
      AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
comm_devices AS (  -- only devices that ran a communication kernel have a row: the others skip the window
    SELECT DISTINCT run_id, rank, device FROM k WHERE comm
),
kc AS (
    SELECT k.* FROM k
    JOIN comm_devices c ON c.run_id = k.run_id AND c.rank IS NOT DISTINCT FROM k.rank AND c.device = k.device
),
swept AS (
    -- the latest end among the device's earlier communication kernels, and earlier computation kernels
    SELECT *,
           coalesce(max(CASE WHEN comm THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p_comm,
           coalesce(max(CASE WHEN NOT comm THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p_comp
    FROM kc
),
totals AS (
    -- a union's length: what each kernel adds past every earlier end; the overlap of the
    -- communication and computation unions is |comm| + |comp| - |comm or comp|
    SELECT run_id, rank, device,
           sum(CASE WHEN comm THEN greatest(0, e - greatest(s, p_comm)) END) AS comm_ns,
           coalesce(sum(CASE WHEN NOT comm THEN greatest(0, e - greatest(s, p_comp)) END), 0) AS comp_ns,
           sum(greatest(0, e - greatest(s, p_comm, p_comp))) AS both_ns
    FROM swept GROUP BY run_id, rank, device
    HAVING count(CASE WHEN comm THEN 1 END) > 0
)
SELECT run_id, rank, device,
       CAST(comm_ns AS BIGINT) AS comm_ns,
       CAST(comm_ns + comp_ns - both_ns AS BIGINT) AS overlap_ns,
       round(100.0 * (comm_ns + comp_ns - both_ns) / comm_ns, 2) AS overlap_pct
FROM totals
ORDER BY run_id, rank, device
