#!/usr/bin/env bash
# The third pre-registered run (theory/phase-lab.md §9, issue 45): plans/v3.json on two shards,
# one thread each, on this 2-core machine.
#
#   scripts/run_v3.sh OUTDIR
#
# Resumable: stop it with SIGTERM or SIGINT to the `phasekv reproduce` processes (each
# checkpoints its model and exits), and rerun the same command to go on; finished units are
# reused. A shard invocation that finishes writes its timing file (OUTDIR/timing/); one that is
# interrupted writes none, so the run's wall time over several invocations is the sum of the
# segments in OUTDIR/logs/driver.log (start to "shards ended"). The shard logs keep the
# training lines. Then:
#   phasekv report --from OUTDIR --out OUTDIR
# Environment: PHASEKV (the binary; default target/release/phasekv).
set -euo pipefail

OUT=${1:?usage: run_v3.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BIN=${PHASEKV:-$ROOT/target/release/phasekv}
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1 OMP_NUM_THREADS=1

mkdir -p "$OUT/logs"
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
echo "$(stamp) start at $(git -C "$ROOT" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/logs/driver.log"
for i in 0 1; do
  ( "$BIN" reproduce --plan "$ROOT/plans/v3.json" --out "$OUT" --shard "$i/2" --jobs 1 2>&1 \
      | grep --line-buffered -E 'training|trained|held-out|extension|error|stopped|checkpoint|done' >>"$OUT/logs/shard-$i.log" ) &
done
wait
echo "$(stamp) shards ended" | tee -a "$OUT/logs/driver.log"
