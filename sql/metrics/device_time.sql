-- title: Device time
-- description: Per run, rank and device: the interval-union lengths that kernel_type_breakdown, temporal_breakdown and comm_comp_overlap report from (each instant counted once): the span and busy time of all GPU activity; the union of each set of kernel types (computation, communication, memory: all seven sets); the union of computation kernels, of communication kernels and of both (kind 'kernel'), and how many communication kernels ran.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: step_from BIGINT NULL Only activity launched in steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only activity launched in steps <= this (NULL: to the last)
-- rollup: rollup_device_time
-- columns: run_id device rank span_ns busy_ns u1_ns u2_ns u3_ns u4_ns u5_ns u6_ns u7_ns compute_ns comm_ns compute_comm_ns comm_kernels
-- rollup-filter: run_id
-- reads: kernels
WITH k AS (
    SELECT run_id, rank, device, start_ns AS s, start_ns + duration_ns AS e,
           -- kernel_type's set bit (kernel_type_breakdown): computation 1, communication 2,
           -- any other type 4 (memory), NULL: no type
           CASE WHEN kernel_type = 'computation' THEN 1 WHEN kernel_type = 'communication' THEN 2
                WHEN kernel_type IS NOT NULL THEN 4 END AS bit,
           -- computation (1) and communication (2) kernels (temporal_breakdown's compute,
           -- comm_comp_overlap's two sides); copies and sets are neither (0)
           CASE WHEN kind = 'kernel' AND kernel_type = 'computation' THEN 1
                WHEN kind = 'kernel' AND kernel_type = 'communication' THEN 2 ELSE 0 END AS kbit
    FROM kernels
    WHERE start_ns IS NOT NULL AND duration_ns IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
),
swept AS (
    -- One ordered pass over the device's activity: for each activity the latest end among
    -- the device's earlier activities (all; of each type; computation and communication
    -- kernels). A union's length is what each of its activities adds past every earlier
    -- end of the union's members, in any order by start (ties in (s, e) change nothing).
    SELECT *,
           coalesce(max(e) OVER w, s) AS p_all,
           coalesce(max(CASE WHEN bit = 1 THEN e END) OVER w, s) AS p1,
           coalesce(max(CASE WHEN bit = 2 THEN e END) OVER w, s) AS p2,
           coalesce(max(CASE WHEN bit = 4 THEN e END) OVER w, s) AS p4,
           coalesce(max(CASE WHEN kbit = 1 THEN e END) OVER w, s) AS pk1,
           coalesce(max(CASE WHEN kbit = 2 THEN e END) OVER w, s) AS pk2
    FROM k
    WINDOW w AS (PARTITION BY run_id, rank, device ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT run_id, device, rank,
       CAST(max(e) - min(s) AS BIGINT) AS span_ns,
       CAST(sum(greatest(0, e - greatest(s, p_all))) AS BIGINT) AS busy_ns,
       -- u<set> of kernel_type_breakdown: the union of the set's types
       CAST(sum(CASE WHEN bit = 1 THEN greatest(0, e - greatest(s, p1)) ELSE 0 END) AS BIGINT) AS u1_ns,
       CAST(sum(CASE WHEN bit = 2 THEN greatest(0, e - greatest(s, p2)) ELSE 0 END) AS BIGINT) AS u2_ns,
       CAST(sum(CASE WHEN bit IN (1, 2) THEN greatest(0, e - greatest(s, p1, p2)) ELSE 0 END) AS BIGINT) AS u3_ns,
       CAST(sum(CASE WHEN bit = 4 THEN greatest(0, e - greatest(s, p4)) ELSE 0 END) AS BIGINT) AS u4_ns,
       CAST(sum(CASE WHEN bit IN (1, 4) THEN greatest(0, e - greatest(s, p1, p4)) ELSE 0 END) AS BIGINT) AS u5_ns,
       CAST(sum(CASE WHEN bit IN (2, 4) THEN greatest(0, e - greatest(s, p2, p4)) ELSE 0 END) AS BIGINT) AS u6_ns,
       CAST(sum(CASE WHEN bit IS NOT NULL THEN greatest(0, e - greatest(s, p1, p2, p4)) ELSE 0 END) AS BIGINT) AS u7_ns,
       CAST(sum(CASE WHEN kbit = 1 THEN greatest(0, e - greatest(s, pk1)) ELSE 0 END) AS BIGINT) AS compute_ns,
       CAST(sum(CASE WHEN kbit = 2 THEN greatest(0, e - greatest(s, pk2)) ELSE 0 END) AS BIGINT) AS comm_ns,
       CAST(sum(CASE WHEN kbit > 0 THEN greatest(0, e - greatest(s, pk1, pk2)) ELSE 0 END) AS BIGINT) AS compute_comm_ns,
       count(CASE WHEN kbit = 2 THEN 1 END) AS comm_kernels
FROM swept
GROUP BY run_id, rank, device
