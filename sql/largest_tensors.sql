-- title: Largest tensors
-- description: The largest node output tensors by allocated (else requested) bytes, with their producer, slot, dtype, shape and allocator (XProf memory viewer's largest buffers).
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: device VARCHAR NULL Only this device, e.g. GPU:0 (NULL: every device)
-- param: limit BIGINT>=0 50 Rows to return
-- scope: run_id
SELECT
    run_id,
    device,
    node_name,
    slot,
    tensor_name,
    dtype,
    shape,
    coalesce(allocated_bytes, requested_bytes) AS bytes,
    requested_bytes,
    allocated_bytes,
    allocator,
    allocation_id
FROM tensors
WHERE coalesce(allocated_bytes, requested_bytes) IS NOT NULL
  AND ($run_id IS NULL OR run_id = $run_id)
  AND ($device IS NULL OR device = $device)
ORDER BY bytes DESC, run_id, device, node_name, slot, tensor_name, allocation_id
LIMIT $limit
