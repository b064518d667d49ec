-- title: Tensor flow
-- description: Follows tensors from op to op (PyTorch execution traces): each value of a tensor with the op that wrote it and each op that read it, in execution order, with the storage, dtype and shape; the ops' start and duration come from the Kineto trace of the same run (joined by rf_id and process_id; NULL without one). A value no op read has one row with no reader; a value written before the trace began (a parameter, an input) has no writer.
-- param: run_id VARCHAR NULL Only this run (NULL: every run)
-- param: tensor_id BIGINT NULL Only this tensor id (NULL: every tensor)
-- param: node_name VARCHAR NULL Only values written or read by this op (NULL: every op)
-- param: limit BIGINT>=0 1000 Rows to return
-- scope: run_id
WITH v AS (
    SELECT run_id, source_file, device, tensor_id, storage_id, storage_offset, numel, element_bytes,
           dtype, shape, strides, node_seq, node_name, slot, consumer_seqs
    FROM tensors
    WHERE consumer_seqs IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
      AND ($tensor_id IS NULL OR tensor_id = $tensor_id)
),
reads AS (
    SELECT v.*, c.reader_seq
    FROM v CROSS JOIN UNNEST(v.consumer_seqs) AS c(reader_seq)
    UNION ALL
    SELECT v.*, CAST(NULL AS BIGINT) AS reader_seq
    FROM v
    WHERE array_length(v.consumer_seqs) = 0
),
et AS (
    SELECT run_id, source_file, seq, node_name, op_schema, process_id, rf_id
    FROM nodes
    WHERE source_format = 'chakra_et'
      AND ($run_id IS NULL OR run_id = $run_id)
),
timed AS (
    -- the Kineto op of each record-function id (one per process; min() only picks the row)
    SELECT run_id, process_id, rf_id, min(start_ns) AS start_ns, min(duration_ns) AS duration_ns
    FROM nodes
    WHERE source_format = 'kineto' AND rf_id IS NOT NULL
      AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY run_id, process_id, rf_id
)
SELECT
    r.run_id,
    r.source_file,
    r.tensor_id,
    r.storage_id,
    r.storage_offset,
    r.numel,
    r.element_bytes,
    r.dtype,
    r.shape,
    r.strides,
    r.device,
    r.node_seq AS writer_seq,
    r.node_name AS writer,
    r.slot AS writer_slot,
    tw.start_ns AS writer_start_ns,
    tw.duration_ns AS writer_duration_ns,
    r.reader_seq,
    er.node_name AS reader,
    er.op_schema AS reader_schema,
    tr.start_ns AS reader_start_ns,
    tr.duration_ns AS reader_duration_ns
FROM reads r
LEFT JOIN et ew ON ew.run_id = r.run_id AND ew.source_file = r.source_file AND ew.seq = r.node_seq
LEFT JOIN et er ON er.run_id = r.run_id AND er.source_file = r.source_file AND er.seq = r.reader_seq
LEFT JOIN timed tw ON tw.run_id = r.run_id AND tw.process_id = ew.process_id AND tw.rf_id = ew.rf_id
LEFT JOIN timed tr ON tr.run_id = r.run_id AND tr.process_id = er.process_id AND tr.rf_id = er.rf_id
WHERE $node_name IS NULL OR r.node_name = $node_name OR er.node_name = $node_name
ORDER BY r.run_id, r.source_file, r.node_seq NULLS FIRST, r.tensor_id, r.storage_id, r.storage_offset,
         r.reader_seq NULLS FIRST
LIMIT $limit
