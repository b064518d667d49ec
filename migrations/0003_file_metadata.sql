-- Keep each source file's own metadata (device properties, distributed rank, ...) on its
-- row: a multi-rank run has one file per rank, and their metadata differ.
ALTER TABLE tracedb_files ADD COLUMN metadata VARCHAR;
ALTER TABLE tracedb_ingest_log ADD COLUMN metadata VARCHAR;
