-- title: Kernel FLOPs
-- description: Per kernel (kind kernel) with a launching op of known FLOPs: the op's FLOPs and bytes attributed to its kernels in proportion to their time (an op's kernels share its work), with the op's precision; the link is kernels.node_seq = nodes.seq of the same run and source file. Included by op_flops and roofline.
SELECT k.run_id, k.device, k.name, n.op_type, coalesce(n.flops_dtype, 'fp32') AS dtype, k.duration_ns,
       n.flops * k.duration_ns / nullif(o.op_kernel_ns, 0) AS flops,
       n.memory_bytes * k.duration_ns / nullif(o.op_kernel_ns, 0) AS bytes
FROM kernels AS k
JOIN (SELECT run_id, source_file, node_seq, sum(duration_ns) AS op_kernel_ns
      FROM kernels
      WHERE kind = 'kernel' AND node_seq IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id)
      GROUP BY run_id, source_file, node_seq) AS o
  ON o.run_id = k.run_id AND o.source_file = k.source_file AND o.node_seq = k.node_seq
JOIN nodes AS n
  ON n.run_id = k.run_id AND n.source_file = k.source_file AND n.seq = k.node_seq
WHERE k.kind = 'kernel' AND n.flops IS NOT NULL
  AND ($run_id IS NULL OR k.run_id = $run_id)
  AND ($run_id IS NULL OR n.run_id = $run_id)
