-- Metadata tables of a warehouse's catalog.duckdb: runs, data files, ingested source files.
CREATE TABLE IF NOT EXISTS tracedb_meta (key VARCHAR PRIMARY KEY, value VARCHAR);

CREATE TABLE IF NOT EXISTS tracedb_runs (
    run_id VARCHAR PRIMARY KEY,
    ingested_at TIMESTAMPTZ,
    source_files VARCHAR[],
    formats VARCHAR[],
    model VARCHAR,
    "commit" VARCHAR,
    hardware VARCHAR,
    started_at TIMESTAMPTZ,
    labels VARCHAR,
    metadata VARCHAR
);

-- One row per parquet file the views read; paths relative to the warehouse.
CREATE TABLE IF NOT EXISTS tracedb_data_files (
    table_name VARCHAR,
    run_id VARCHAR,
    device VARCHAR,
    path VARCHAR,
    rows BIGINT,
    ingest_id VARCHAR
);

-- The source files of every run as last ingested (ok or error).
CREATE TABLE IF NOT EXISTS tracedb_files (
    run_id VARCHAR,
    path VARCHAR,
    size_bytes BIGINT,
    sha256 VARCHAR,
    format VARCHAR,
    rows_nodes BIGINT,
    rows_kernels BIGINT,
    rows_tensors BIGINT,
    rows_allocations BIGINT,
    status VARCHAR,
    error VARCHAR,
    seconds DOUBLE,
    ingest_id VARCHAR,
    ingested_at TIMESTAMPTZ
);
