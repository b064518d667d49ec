-- title: Kernel time per step
-- description: Per run, rank (NULL: a trace without rank information), device, step, kind and kernel name: instances, total time and bytes moved (copies and sets), the per-step samples behind the regression report's kernel, GPU kernel time and copy metrics; step NULL is what ran outside any step.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: kind VARCHAR NULL Only this kind: kernel, memcpy or memset (NULL: all GPU activity)
-- scope: run_id
SELECT
    run_id,
    rank,
    device,
    step,
    kind,
    coalesce(name, '(unnamed)') AS name,
    count(*) AS instances,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    CAST(sum(bytes) AS BIGINT) AS total_bytes
FROM kernels
WHERE ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
  AND ($kind IS NULL OR kind = $kind)
GROUP BY run_id, rank, device, step, kind, coalesce(name, '(unnamed)')
ORDER BY run_id, rank NULLS LAST, device, step NULLS LAST, kind, total_ns DESC, name
