-- title: Ops by name
-- description: Per run, device, framework op name and op type: timed executions, total, average, min and max duration; the one definition behind top_ops and rollup_op_summary (its rows are each one run's, so the rollup stores them whole).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- rollup: rollup_op_summary
-- columns: run_id device node_name op_type executions total_ns avg_duration min_ns max_ns
-- rollup-filter: run_id device
-- reads: nodes
SELECT
    run_id,
    device,
    node_name,
    op_type,
    count(*) AS executions,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    round(avg(duration_ns), 1) AS avg_duration,  -- ns (a double: not named *_ns, the integer ns columns)
    min(duration_ns) AS min_ns,
    max(duration_ns) AS max_ns
FROM nodes
WHERE duration_ns IS NOT NULL
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
GROUP BY run_id, device, node_name, op_type
