-- title: Kernel type breakdown
-- description: Per run, rank and device: GPU time by the set of kernel types running at once (computation, communication, memory, and their overlaps such as 'computation overlapping communication'), each instant counted once, with its share of the device's busy time, as Holistic Trace Analysis' get_gpu_kernel_breakdown kernel-type table (HTA sums it over ranks). kernel_type comes from the name rules in tracedb/kernel_types.py.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
WITH k AS (
    SELECT run_id, rank, device, start_ns AS s, start_ns + duration_ns AS e,
           CASE kernel_type WHEN 'computation' THEN 1 WHEN 'communication' THEN 2 ELSE 4 END AS bit
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL AND kernel_type IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
swept AS (  -- per type, the latest end among the device's earlier activities of that type
    SELECT *,
           coalesce(max(CASE WHEN bit = 1 THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p1,
           coalesce(max(CASE WHEN bit = 2 THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p2,
           coalesce(max(CASE WHEN bit = 4 THEN e END) OVER (PARTITION BY run_id, rank, device ORDER BY s, e
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s) AS p4
    FROM k
),
unions AS (  -- u<set>: length of the union of the set's types (an activity adds what lies past every earlier end)
    SELECT run_id, rank, device,
           sum(CASE WHEN bit = 1 THEN greatest(0, e - greatest(s, p1)) ELSE 0 END) AS u1,
           sum(CASE WHEN bit = 2 THEN greatest(0, e - greatest(s, p2)) ELSE 0 END) AS u2,
           sum(CASE WHEN bit = 4 THEN greatest(0, e - greatest(s, p4)) ELSE 0 END) AS u4,
           sum(CASE WHEN bit <> 4 THEN greatest(0, e - greatest(s, p1, p2)) ELSE 0 END) AS u3,
           sum(CASE WHEN bit <> 2 THEN greatest(0, e - greatest(s, p1, p4)) ELSE 0 END) AS u5,
           sum(CASE WHEN bit <> 1 THEN greatest(0, e - greatest(s, p2, p4)) ELSE 0 END) AS u6,
           sum(greatest(0, e - greatest(s, p1, p2, p4))) AS u7
    FROM swept
    GROUP BY run_id, rank, device
),
by_state AS (  -- time in exactly each set of types, by inclusion-exclusion over the unions
    SELECT run_id, rank, device, state,
           CAST(CASE state WHEN 1 THEN u7 - u6
                           WHEN 2 THEN u7 - u5
                           WHEN 4 THEN u7 - u3
                           WHEN 3 THEN u5 + u6 - u4 - u7
                           WHEN 5 THEN u3 + u6 - u2 - u7
                           WHEN 6 THEN u3 + u5 - u1 - u7
                           ELSE u1 + u2 + u4 - u3 - u5 - u6 + u7 END AS BIGINT) AS time_ns
    FROM unions CROSS JOIN (VALUES (1), (2), (3), (4), (5), (6), (7)) AS states(state)
)
SELECT run_id, rank, device,
       concat_ws(' overlapping ',
                 CASE WHEN state IN (1, 3, 5, 7) THEN 'computation' END,
                 CASE WHEN state IN (2, 3, 6, 7) THEN 'communication' END,
                 CASE WHEN state >= 4 THEN 'memory' END) AS kernel_types,
       time_ns,
       round(100.0 * time_ns / sum(time_ns) OVER (PARTITION BY run_id, rank, device), 2) AS pct
FROM by_state
WHERE time_ns > 0
ORDER BY run_id, rank, device, time_ns DESC, kernel_types
