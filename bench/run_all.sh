#!/usr/bin/env bash
# Re-run every benchmark behind bench/RESULTS.md; prints ratios against baselines timed
# in the same process. Usage:
#   bench/run_all.sh [OUT_DIR] [FLEET_SIZES...]      (default: /tmp/tracedb-bench 100 300 1000)
# Environment: KERNELS (kernel rows per Kineto fleet run, default 10500), JOBS (ingest
# workers, default: cores), TF_MB (TF text sizes, default "17 200"), KINETO_MB (the large
# Kineto file's size for the memory bench, default 1024: its json.load baseline needs ~6.5 GB),
# REPEAT (default 3).
# The 1000-run fleet (10 M kernel rows) takes tens of minutes to build on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/tracedb-bench}
shift || true
SIZES=${*:-100 300 1000}
KERNELS=${KERNELS:-10500}
JOBS=${JOBS:-$(nproc)}
TF_MB=${TF_MB:-17 200}
KINETO_MB=${KINETO_MB:-1024}
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"
LOG="$OUT/results-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
  echo "# tracedb bench, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM"
  python -c 'import sys, duckdb, pyarrow, google.protobuf as p; print("python", sys.version.split()[0], "duckdb", duckdb.__version__, "pyarrow", pyarrow.__version__, "protobuf", p.__version__)'
  for mb in $TF_MB; do
    echo; echo "## TF StepStats text, $mb MB"; python bench/bench_tf_text.py --mb "$mb" --repeat "$REPEAT"
  done
  echo; echo "## TF StepStats text, 17 MB, timestamps that never repeat (the reader's line cache's honest case)"
  python bench/bench_tf_text.py --shift --repeat "$REPEAT"
  echo; echo "## Per-trace ingest vs plain parsing (and HTA when installed)"; python bench/bench_ingest.py --repeat "$REPEAT"
  echo; echo "## One 8-rank Kineto job: tracedb ingest vs HTA load + kernel breakdown"
  python bench/bench_kineto_hta.py --repeat "$((REPEAT > 5 ? REPEAT : 5))" --jobs "$JOBS"
  echo; echo "## The same, one process each (tracedb --jobs 1, HTA without its pool), with CPU seconds"
  python bench/bench_kineto_hta.py --repeat "$((REPEAT > 5 ? REPEAT : 5))" --serial --existing
  echo; echo "## A 24-rank job, one process each (the fixed costs - start-up, lake, commit - spread over 3x the ranks)"
  python bench/bench_kineto_hta.py --repeat 2 --serial --ranks 24
  echo; echo "## Kineto: the whole ingest against msgspec decoding into typed structs (Decimal times)"
  python bench/bench_kineto_decode.py --file tests/data/hta_nccl_allreduce/rank-0.json.gz --rounds "$REPEAT"
  python bench/bench_kineto_decode.py --mb 100 --rounds "$REPEAT"
  echo; echo "## Every other format: the whole ingest against its decoder (issue 29)"; python bench/bench_decoders.py --mb 100 --repeat "$REPEAT"
  echo; echo "## A $KINETO_MB MB Kineto file: peak memory of the streaming reader and the ingest vs json.load"
  python bench/bench_kineto_memory.py --mb "$KINETO_MB"
  echo; echo "## Streaming TF binary / XSpace / MegEngine vs whole-document readers"; python bench/bench_stream.py --repeat "$REPEAT"
  echo; echo "## CLI start-up beyond bare Python"; python bench/bench_startup.py --repeat 10
  echo; echo "## --jobs $JOBS vs --jobs 1, 24 runs"; python bench/bench_jobs.py --repeat "$REPEAT" --jobs "$JOBS" --phases
  echo; echo "## Rollups' share of an ingest, 24 runs"; python bench/bench_rollups.py --repeat "$REPEAT"
  for n in $SIZES; do
    echo; echo "## Fleet of $n runs"
    python bench/build_fleet.py "$OUT/fleet$n" --runs "$n" --kernels "$KERNELS" --jobs "$JOBS"
    python bench/bench_queries.py "$OUT/fleet$n/wh" --repeat "$REPEAT"
  done
} 2>&1 | tee "$LOG"
echo "written: $LOG"
