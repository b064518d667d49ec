-- title: Collectives
-- description: Communication kernels (NCCL/RCCL, all-reduce, all-gather, reduce-scatter, all-to-all, by name) per run, device and name: instances, time, share of all kernel time, and how much of it overlaps non-collective kernels running at the same time on other streams versus exposed (HTA communication/computation overlap).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: name_like VARCHAR NULL Also count kernels whose name matches this LIKE pattern as collectives
-- param: step_from BIGINT NULL Only kernels launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only kernels launched in steps <= this (NULL: to the last)
-- rollup: rollup_collectives
-- columns: run_id device name instances total_ns kernel_time_pct overlapped_ns exposed_ns overlap_pct
-- rollup-filter: run_id device
-- reads: kernels
-- rollup-sql: metrics/streamed/collectives.sql
-- What a collective overlaps is the part of its span that the union of its device's compute
-- (non-collective) kernels covers. With F(t) the time up to t that the union covers, the
-- overlap of a collective from s to e is F(e) - F(s), so each collective is looked at twice
-- in one sweep by time over its device's rows (compute kernels at their start, collectives
-- at their start and end), never paired with the kernels running beside it: two window
-- sorts of a device's kernels plus its collectives again, CPU n log n. In that order F at
-- a row is
--     A + least(t, M)
-- where M is the latest end of the compute kernels up to it (F is 0 before the first) and A the
-- running sum, over the kernels that open an island of the union (start after the M before
-- them), of (the island closed, M then; 0 at the first) - (their start). Only standard
-- windows with PARTITION BY, ORDER BY and a ROWS frame, so every engine of `--dialect`
-- gives the same rows. Rows alike in (t, side) are peers whose order no engine promises:
-- F is read at collectives' rows only, and what precedes one of those (every compute
-- kernel starting before it, or at its time for side 1) is the same set in both windows;
-- of compute kernels starting together the first in either order opens the island, with
-- the same step (no duration is negative: the validator makes those NULL). The ingest
-- computes the rollup with metrics/streamed/collectives.sql (DuckDB's streaming windows
-- over one sort: the same rows for less CPU, memory bounded however many kernels one
-- device holds); tests/test_collectives_memory.py checks both against an interval oracle.
WITH k AS NOT MATERIALIZED (
    -- Rows without a run or device are in no device's totals: no output row.
    SELECT run_id, device, name, start_ns, start_ns + duration_ns AS end_ns, duration_ns
    FROM kernels
    WHERE kind = 'kernel' AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND run_id IS NOT NULL AND device IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
patterns AS (
    SELECT * FROM (VALUES ('%nccl%'), ('%allreduce%'), ('%all_reduce%'), ('%all-reduce%'),
                          ('%allgather%'), ('%all_gather%'), ('%all-gather%'),
                          ('%reducescatter%'), ('%reduce_scatter%'), ('%reduce-scatter%'),
                          ('%alltoall%'), ('%all_to_all%'), ('%all-to-all%')) AS p(pattern)
),
names AS (
    SELECT name
    FROM (SELECT DISTINCT name FROM kernels
          WHERE name IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id) AND ($device IS NULL OR device = $device)) d
    WHERE EXISTS (SELECT 1 FROM patterns p WHERE lower(d.name) LIKE p.pattern)
       OR ($name_like IS NOT NULL AND name LIKE $name_like)
),
sides AS (
    SELECT * FROM (VALUES (-1), (0), (1)) AS s(side)
),
edges AS (
    -- A compute kernel at its start (side 0, its end carried); a collective at its start
    -- (side -1) and at its end (side 1, its name and duration carried).
    SELECT k.run_id, k.device, s.side,
           CASE WHEN s.side = 1 THEN k.end_ns ELSE k.start_ns END AS t,
           CASE WHEN s.side = 0 THEN k.end_ns END AS end_ns,
           CASE WHEN s.side <> 0 THEN k.name END AS name,
           CASE WHEN s.side <> -1 THEN k.duration_ns END AS duration_ns
    FROM k
    LEFT JOIN names n ON n.name = k.name
    JOIN sides s ON abs(s.side) = CASE WHEN n.name IS NULL THEN 0 ELSE 1 END
),
reached AS (
    -- before_ns / upto_ns: the latest end of the device's compute kernels before this row
    -- / up to it (NULL: none yet)
    SELECT *,
           max(end_ns) OVER (PARTITION BY run_id, device ORDER BY t, side
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_ns,
           max(end_ns) OVER (PARTITION BY run_id, device ORDER BY t, side
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS upto_ns
    FROM edges
),
opened AS (
    -- step_ns: at a compute kernel opening an island, (the island closed) - (its start)
    SELECT *,
           CASE WHEN side = 0 AND (before_ns IS NULL OR t > before_ns) THEN coalesce(before_ns, 0) - t ELSE 0 END
               AS step_ns
    FROM reached
),
swept AS (
    -- covered_ns: F at this row (least() spelled out: engines differ on NULLs in it)
    SELECT run_id, device, side, name, duration_ns,
           sum(step_ns) OVER (PARTITION BY run_id, device ORDER BY t, side
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               + CASE WHEN upto_ns IS NULL THEN 0 WHEN t < upto_ns THEN t ELSE upto_ns END AS covered_ns
    FROM opened
),
grouped AS (
    -- per device and collective name (NULL: the compute kernels). The sum of signed F's
    -- stays within a 64-bit integer on every engine while collectives x the device's
    -- covered time does (1 M collectives x an hour of compute: 3.6e18 < 9.2e18).
    SELECT run_id, device, name,
           count(CASE WHEN side = 1 THEN 1 END) AS instances,
           sum(duration_ns) AS duration_ns,
           sum(CASE WHEN side = 1 THEN covered_ns WHEN side = -1 THEN -covered_ns END) AS overlap_ns
    FROM swept
    GROUP BY run_id, device, name
),
totals AS (
    -- kernel time of every kernel of the device, collectives included
    SELECT *, sum(duration_ns) OVER (PARTITION BY run_id, device) AS kernel_ns
    FROM grouped
)
SELECT
    run_id,
    device,
    name,
    instances,
    CAST(duration_ns AS BIGINT) AS total_ns,
    round(100.0 * duration_ns / nullif(kernel_ns, 0), 2) AS kernel_time_pct,
    CAST(overlap_ns AS BIGINT) AS overlapped_ns,
    CAST(duration_ns - overlap_ns AS BIGINT) AS exposed_ns,
    round(100.0 * overlap_ns / nullif(duration_ns, 0), 2) AS overlap_pct
FROM totals
WHERE name IS NOT NULL
