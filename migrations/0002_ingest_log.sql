-- Keep every ingest attempt, not only the latest per run: `ingest_log` is append-only.
CREATE TABLE IF NOT EXISTS tracedb_ingest_log AS SELECT * FROM tracedb_files WITH NO DATA;
INSERT INTO tracedb_ingest_log SELECT * FROM tracedb_files;
