-- title: Compare runs
-- description: Kernel by kernel (by kind and name) between a baseline and a candidate run: instances and total time in each, their deltas, and status new, vanished, changed or unchanged, largest time change first (HTA trace diff).
-- param: baseline VARCHAR REQUIRED Baseline run id
-- param: candidate VARCHAR REQUIRED Candidate run id
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: baseline candidate
WITH b AS (
    SELECT kind, name, count(*) AS instances, CAST(sum(duration_ns) AS BIGINT) AS total_ns
    FROM kernels
    WHERE run_id = $baseline AND ($device IS NULL OR device = $device)
    GROUP BY kind, name
),
c AS (
    SELECT kind, name, count(*) AS instances, CAST(sum(duration_ns) AS BIGINT) AS total_ns
    FROM kernels
    WHERE run_id = $candidate AND ($device IS NULL OR device = $device)
    GROUP BY kind, name
),
j AS (
    SELECT
        coalesce(c.kind, b.kind) AS kind,
        coalesce(c.name, b.name) AS name,
        CASE
            WHEN b.instances IS NULL THEN 'new'
            WHEN c.instances IS NULL THEN 'vanished'
            WHEN b.instances = c.instances AND b.total_ns = c.total_ns THEN 'unchanged'
            ELSE 'changed'
        END AS status,
        b.instances AS baseline_instances,
        c.instances AS candidate_instances,
        coalesce(c.instances, 0) - coalesce(b.instances, 0) AS delta_instances,
        b.total_ns AS baseline_ns,
        c.total_ns AS candidate_ns,
        coalesce(c.total_ns, 0) - coalesce(b.total_ns, 0) AS delta_ns
    FROM b
    FULL OUTER JOIN c ON c.kind = b.kind AND c.name IS NOT DISTINCT FROM b.name
)
SELECT
    kind,
    name,
    status,
    baseline_instances,
    candidate_instances,
    delta_instances,
    baseline_ns,
    candidate_ns,
    delta_ns,
    round(100.0 * delta_ns / nullif(baseline_ns, 0), 2) AS delta_pct
FROM j
ORDER BY abs(delta_ns) DESC, kind, name
LIMIT $limit
