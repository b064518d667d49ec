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
-- (The ingest computes this metric's rollup with metrics/streamed/collectives.sql: the same
-- rows, DuckDB only, one sweep by time, CPU ~linear and memory bounded however many kernels
-- one device holds; here each collective meets every kernel of its device:
-- tests/test_collectives_memory.py.)
WITH k AS NOT MATERIALIZED (
    SELECT run_id, device, stream, name, start_ns, start_ns + duration_ns AS end_ns, duration_ns
    FROM kernels
    WHERE kind = 'kernel' AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
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
coll AS (
    SELECT run_id, device, stream, name, start_ns, end_ns, duration_ns,
           row_number() OVER (ORDER BY run_id, device, stream, start_ns, end_ns, name) AS instance
    FROM k
    WHERE name IN (SELECT name FROM names)
),
totals AS (
    -- Kernel time of the devices that ran a collective only.
    SELECT run_id, device, sum(duration_ns) AS kernel_ns
    FROM k
    WHERE (run_id, device) IN (SELECT DISTINCT run_id, device FROM coll)
    GROUP BY run_id, device
),
pairs AS (
    -- Each collective against the compute (non-collective) kernels running at the same time,
    -- clipped to the collective. Kernels on one stream run one after another, so what
    -- overlaps a collective runs on another stream. Merging only these clipped intervals
    -- (per instance) gives the same overlap as merging every compute kernel of the device
    -- first, at a fraction of the rows. DISTINCT: rows alike in instance, start and end
    -- would be peers in both windows below, which need not order them alike (two islands
    -- of one span: an overlap longer than the collective).
    SELECT DISTINCT c.instance, greatest(x.start_ns, c.start_ns) AS start_ns, least(x.end_ns, c.end_ns) AS end_ns
    FROM coll c
    JOIN k x
      ON x.run_id = c.run_id AND x.device = c.device
     AND x.start_ns < c.end_ns AND x.end_ns > c.start_ns
    WHERE NOT EXISTS (SELECT 1 FROM names n WHERE n.name = x.name)
),
prev AS (
    SELECT instance, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY instance ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM pairs
),
numbered AS (
    SELECT *,
           sum(CASE WHEN prev_end_ns IS NULL OR start_ns > prev_end_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY instance ORDER BY start_ns, end_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM prev
),
merged AS (
    SELECT instance, island, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM numbered
    GROUP BY instance, island
),
covered AS (
    SELECT instance, sum(end_ns - start_ns) AS overlap_ns
    FROM merged
    GROUP BY instance
),
overlap AS (
    SELECT c.instance, c.run_id, c.device, c.name, c.duration_ns, coalesce(v.overlap_ns, 0) AS overlap_ns
    FROM coll c
    LEFT JOIN covered v ON v.instance = c.instance
)
SELECT
    o.run_id,
    o.device,
    o.name,
    count(*) AS instances,
    CAST(sum(o.duration_ns) AS BIGINT) AS total_ns,
    round(100.0 * sum(o.duration_ns) / nullif(max(t.kernel_ns), 0), 2) AS kernel_time_pct,
    CAST(sum(o.overlap_ns) AS BIGINT) AS overlapped_ns,
    CAST(sum(o.duration_ns) - sum(o.overlap_ns) AS BIGINT) AS exposed_ns,
    round(100.0 * sum(o.overlap_ns) / nullif(sum(o.duration_ns), 0), 2) AS overlap_pct
FROM overlap o
JOIN totals t ON t.run_id = o.run_id AND t.device = o.device
GROUP BY o.run_id, o.device, o.name
