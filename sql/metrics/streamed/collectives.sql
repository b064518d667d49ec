-- The rollup of metrics/collectives.sql (its declaration: header, parameters, rows), as the
-- ingest computes it: the same rows, in DuckDB only, with CPU ~linear in a device's kernels
-- and memory bounded however many one device holds. The declaration sweeps by time too,
-- in standard windows (PARTITION BY run and device, an explicit ORDER BY and frame) that
-- any engine runs: two window sorts of each device's rows, the second over the first's
-- output. Here one sweep over each device's rows, read in the order of a single ORDER BY
-- (which spills) by DuckDB's streaming windows (`OVER ()`: lag, running sum and max), as
-- metrics/streamed/stream_overlap.sql does: less CPU and memory for the ingest. Other
-- engines promise no such order: `tracedb query --dialect` prints the declaration, never
-- this. tests/test_collectives_memory.py checks both against an interval oracle.
--
-- What a collective overlaps is the part of its span covered by the union of its device's
-- compute kernels (clip-then-merge as the declaration, or merge-then-clip: the same). With
-- F(t) the time up to t that the union covers, the overlap of a collective from s to e is
-- F(e) - F(s). In the device's rows sorted by time (compute kernels at their start, each
-- collective twice, at its start and at its end), F at a row is
--     A + least(t, M)
-- where M is the latest end of the compute kernels before it and A the running sum, over
-- those kernels, of (the island closed before, M then) - (its start) at each kernel that
-- opens an island (starts after M). A runs on across devices without reset: what it
-- carries from earlier devices is the same at a collective's start and end and cancels.
WITH k AS (
    -- A collective: a kernel whose name matches one of the patterns (or $name_like), as
    -- the declaration's `names`; rows without a run or device are in no device's totals.
    SELECT run_id, device, name, start_ns, start_ns + duration_ns AS end_ns, duration_ns,
           coalesce(lower(name) LIKE '%nccl%' OR lower(name) LIKE '%allreduce%'
                    OR lower(name) LIKE '%all_reduce%' OR lower(name) LIKE '%all-reduce%'
                    OR lower(name) LIKE '%allgather%' OR lower(name) LIKE '%all_gather%'
                    OR lower(name) LIKE '%all-gather%' OR lower(name) LIKE '%reducescatter%'
                    OR lower(name) LIKE '%reduce_scatter%' OR lower(name) LIKE '%reduce-scatter%'
                    OR lower(name) LIKE '%alltoall%' OR lower(name) LIKE '%all_to_all%'
                    OR lower(name) LIKE '%all-to-all%'
                    OR ($name_like IS NOT NULL AND name LIKE $name_like), false) AS coll
    FROM kernels
    WHERE kind = 'kernel' AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND run_id IS NOT NULL AND device IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($device IS NULL OR device = $device)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
rows AS (
    -- A compute kernel at its start (side 0, its end carried); a collective at its start
    -- (side -1) and at its end (side 1, its duration carried).
    SELECT run_id, device, side,
           CASE side WHEN 1 THEN end_ns ELSE start_ns END AS t,
           CASE WHEN side = 0 THEN end_ns END AS end_ns,
           CASE WHEN side <> 0 THEN name END AS name,
           CASE WHEN side <> -1 THEN duration_ns END AS duration_ns
    FROM (SELECT *, unnest(CASE WHEN coll THEN [-1, 1] ELSE [0] END) AS side FROM k)
),
ordered AS (
    SELECT * FROM rows ORDER BY run_id, device, t
),
marked AS (
    SELECT *, CAST(lag(run_id) OVER () IS DISTINCT FROM run_id OR lag(device) OVER () IS DISTINCT FROM device
                   AS INTEGER) AS first_of_device
    FROM ordered
),
numbered AS (
    -- g: the device's number in that order
    SELECT *, sum(first_of_device) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS g
    FROM marked
),
lifted AS (
    -- The latest end of the device's compute kernels so far, lifted by the device's
    -- number times 2^64 so that no earlier device's end counts (every end fits in 64 bits).
    SELECT *, g * CAST(18446744073709551616 AS HUGEINT) AS base,
           max(CASE WHEN side = 0 THEN g * CAST(18446744073709551616 AS HUGEINT)
                                       + (end_ns + CAST(9223372036854775808 AS HUGEINT)) END)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS lifted_end
    FROM numbered
),
opened AS (
    -- before_ns: that latest end before this row (NULL: none yet on the device); a compute
    -- kernel starting after it opens an island, closing the one before at before_ns.
    SELECT *,
           CASE WHEN side = 0 AND (before_ns IS NULL OR t > before_ns) THEN coalesce(before_ns, 0) - t ELSE 0 END
               AS step_ns
    FROM (SELECT *, CASE WHEN lag(lifted_end) OVER () >= base
                         THEN CAST(lag(lifted_end) OVER () - base - CAST(9223372036854775808 AS HUGEINT) AS BIGINT)
                    END AS before_ns
          FROM lifted)
),
swept AS (
    SELECT run_id, device, side, name, duration_ns,
           sum(step_ns) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               + CASE WHEN lifted_end >= base
                      THEN least(t, lifted_end - base - CAST(9223372036854775808 AS HUGEINT)) ELSE 0 END AS covered_ns
    FROM opened
),
grouped AS (
    -- per device and collective name (NULL: the compute kernels): what the output needs
    SELECT run_id, device, name,
           count(*) FILTER (WHERE side = 1) AS instances,
           sum(duration_ns) AS duration_ns,
           sum(CASE side WHEN 1 THEN covered_ns WHEN -1 THEN -covered_ns END) AS overlap_ns
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
