-- title: Ops of unknown FLOPs
-- description: Per run and op type whose FLOPs tracedb cannot tell (no rule in tracedb/flops.py, no figure in the trace, or shapes not recorded): they count zero in mfu, op_flops and roofline. With the ops' count, the GPU kernels they launched themselves and those kernels' time and share of the run's kernel time, so a user sees what MFU leaves out; op types that launched no kernel come last. Kernels linked to no op (an XLA library call inside a command buffer, a kernel whose launch was not traced) are one more row, op type '(no op)', ops 0: with them every kernel's time is either under an op of known FLOPs or in this list.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
WITH unknown AS (
    SELECT run_id, source_file, seq, op_type
    FROM nodes
    WHERE flops IS NULL AND ($run_id IS NULL OR run_id = $run_id)
),
k AS (
    SELECT run_id, source_file, node_seq, count(*) AS kernels, sum(duration_ns) AS kernel_ns
    FROM kernels
    WHERE kind = 'kernel' AND node_seq IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, source_file, node_seq
),
run_kernel AS (
    SELECT run_id, sum(duration_ns) AS kernel_ns
    FROM kernels
    WHERE kind = 'kernel' AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id
),
per_type AS (
    SELECT u.run_id, u.op_type, count(*) AS ops, coalesce(sum(k.kernels), 0) AS kernels,
           coalesce(sum(k.kernel_ns), 0) AS kernel_ns
    FROM unknown AS u
    LEFT JOIN k ON k.run_id = u.run_id AND k.source_file = u.source_file AND k.node_seq = u.seq
    GROUP BY u.run_id, u.op_type
    UNION ALL
    SELECT run_id, '(no op)' AS op_type, 0 AS ops, count(*) AS kernels, sum(duration_ns) AS kernel_ns
    FROM kernels
    WHERE kind = 'kernel' AND node_seq IS NULL AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id
)
SELECT p.run_id, p.op_type, p.ops, CAST(p.kernels AS BIGINT) AS kernels, CAST(p.kernel_ns AS BIGINT) AS kernel_ns,
       round(100.0 * p.kernel_ns / nullif(r.kernel_ns, 0), 2) AS kernel_time_pct
FROM per_type AS p
LEFT JOIN run_kernel AS r ON r.run_id = p.run_id
ORDER BY p.kernel_ns DESC, p.ops DESC, p.run_id, p.op_type
LIMIT $limit
