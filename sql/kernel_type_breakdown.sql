-- title: Kernel type breakdown
-- description: Per run, rank and device: GPU time by the set of kernel types running at once (computation, communication, memory, and their overlaps such as 'computation overlapping communication'), each instant counted once, with its share of the device's busy time, as Holistic Trace Analysis' get_gpu_kernel_breakdown kernel-type table (HTA sums it over ranks). kernel_type comes from the name rules in tracedb/kernel_types.py.
-- scope: run_id
-- The seven unions are the metric sql/metrics/device_time.sql: whole runs read its per-run
-- rollup, a step range computes them from raw rows.
WITH device_time AS (
-- include: metrics/device_time.sql
),
unions AS (  -- u<set>: length of the union of the set's types (bits: computation 1, communication 2, memory 4)
    SELECT run_id, rank, device, u1_ns AS u1, u2_ns AS u2, u3_ns AS u3, u4_ns AS u4, u5_ns AS u5, u6_ns AS u6, u7_ns AS u7
    FROM device_time
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
