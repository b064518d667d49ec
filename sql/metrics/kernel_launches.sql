-- title: Kernel launches
-- description: Per launched GPU activity: its launch call (name, rank, step, CPU duration) joined with the activity (device, name, kind, GPU start and duration) by source file and correlation id, and the launch delay (activity start - end of its launch call, 0 when negative): the rows kernel_launch_stats filters, flags and orders.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- rollup: rollup_kernel_launches
-- columns: run_id rank device step correlation_id launch_call kernel activity_kind cpu_duration_ns kernel_start_ns gpu_duration_ns launch_delay_ns
-- rollup-filter: run_id
-- reads: runtime_calls kernels
SELECT c.run_id, c.rank, k.device, c.step, c.correlation_id, c.name AS launch_call, k.name AS kernel,
       k.kind AS activity_kind, c.duration_ns AS cpu_duration_ns,
       k.start_ns AS kernel_start_ns, k.duration_ns AS gpu_duration_ns,
       greatest(k.start_ns - (c.start_ns + c.duration_ns), 0) AS launch_delay_ns
FROM runtime_calls c
JOIN kernels k
  ON k.run_id = c.run_id AND k.source_file = c.source_file AND k.correlation_id = c.correlation_id
WHERE ($run_id IS NULL OR c.run_id = $run_id)
