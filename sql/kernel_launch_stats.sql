-- title: Kernel launch statistics
-- description: Per launched GPU activity: the launch call's duration on the CPU, the activity's duration on the GPU, and the launch delay (activity start - end of its launch call, 0 when negative), with HTA's three flags: GPU time shorter than the launch call, a long launch call, a long delay (Holistic Trace Analysis' get_cuda_kernel_launch_stats). Unlike HTA, every launch API counts (cuLaunchKernel, hipLaunchKernel, hipMemcpyWithStream, mtia runFunction, ...), not only cudaLaunchKernel(ExC), cudaMemcpyAsync and cudaMemsetAsync, and times keep their nanoseconds.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: rank BIGINT NULL Only this rank (NULL: every rank)
-- param: step_from BIGINT NULL Only launches of steps >= this (NULL: from the first)
-- param: step_to BIGINT NULL Only launches of steps <= this (NULL: to the last)
-- param: runtime_cutoff_ns BIGINT>=0 50000 A launch call longer than this is flagged (HTA: 50 us)
-- param: launch_delay_cutoff_ns BIGINT>=0 100000 A launch delay longer than this is flagged (HTA: 100 us)
-- scope: run_id
-- One row per launch, so no summary shrinks it; but every row is one run's, and its
-- parameters filter rows (rank, steps) or flag them (the cutoffs): the launches joined with
-- their activities are the metric sql/metrics/kernel_launches.sql, always read from its
-- per-run rollup, and this filters, flags and orders them.
WITH launches AS (
-- include: metrics/kernel_launches.sql
)
SELECT run_id, rank, device, step, correlation_id, launch_call, kernel, activity_kind AS kind,
       cpu_duration_ns, gpu_duration_ns, launch_delay_ns,
       gpu_duration_ns < cpu_duration_ns AS short_kernel,
       cpu_duration_ns > $runtime_cutoff_ns AS long_launch_call,
       launch_delay_ns > $launch_delay_cutoff_ns AS long_launch_delay,
       kernel_start_ns
FROM launches
WHERE ($rank IS NULL OR rank = $rank)
  AND ($step_from IS NULL OR step >= $step_from)
  AND ($step_to IS NULL OR step <= $step_to)
ORDER BY run_id, rank, kernel_start_ns, correlation_id
