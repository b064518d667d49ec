-- title: Kernel type breakdown
-- description: Per run, rank and device: GPU time by the set of kernel types running at once (computation, communication, memory, and their overlaps such as 'computation overlapping communication'), each instant counted once, with its share of the device's busy time, as Holistic Trace Analysis' get_gpu_kernel_breakdown kernel-type table (HTA sums it over ranks). kernel_type comes from the name rules in tracedb/kernel_types.py.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- scope: run_id
WITH k AS (
    SELECT run_id, rank, device, kernel_type, start_ns AS s, start_ns + duration_ns AS e
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL AND kernel_type IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
marked AS (
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
    SELECT run_id, rank, device, kernel_type, min(s) AS s, max(e) AS e,
           CASE kernel_type WHEN 'computation' THEN 1 WHEN 'communication' THEN 2 ELSE 4 END AS bit
    FROM numbered GROUP BY run_id, rank, device, kernel_type, island
),
edges AS (  -- islands of one type are disjoint: +bit at a start, -bit at an end gives the set
    SELECT run_id, rank, device, t, sum(d) AS d
    FROM (SELECT run_id, rank, device, s AS t, bit AS d FROM islands
          UNION ALL SELECT run_id, rank, device, e, -bit FROM islands)
    GROUP BY run_id, rank, device, t
),
segments AS (
    SELECT run_id, rank, device,
           sum(d) OVER (PARTITION BY run_id, rank, device ORDER BY t ROWS UNBOUNDED PRECEDING) AS state,
           lead(t) OVER (PARTITION BY run_id, rank, device ORDER BY t) - t AS dur
    FROM edges
),
by_state AS (
    SELECT run_id, rank, device, CAST(state AS BIGINT) AS state, CAST(sum(dur) AS BIGINT) AS time_ns
    FROM segments WHERE state > 0 AND dur > 0
    GROUP BY run_id, rank, device, state
)
SELECT run_id, rank, device,
       concat_ws(' overlapping ',
                 CASE WHEN state IN (1, 3, 5, 7) THEN 'computation' END,
                 CASE WHEN state IN (2, 3, 6, 7) THEN 'communication' END,
                 CASE WHEN state >= 4 THEN 'memory' END) AS kernel_types,
       time_ns,
       round(100.0 * time_ns / sum(time_ns) OVER (PARTITION BY run_id, rank, device), 2) AS pct
FROM by_state
ORDER BY run_id, rank, device, time_ns DESC, kernel_types
