#!/usr/bin/env bash
# The probes of theory/phase-lab.md §9.3 (issue 45) for one candidate, then the rule's script.
#
#   scripts/probe_v3.sh CANDIDATE OUTDIR        CANDIDATE: a plan of plans/probes-v3/ (t1 ... t6)
#
# Runs `phasekv reproduce --plan plans/probes-v3/CANDIDATE.json` on two shards (one thread
# each): full attention on probe seeds 100-102 and w8s4, w8s8 on seed 100, trained by §9.4's
# rule and evaluated beyond the v3 run's floor (the plan's depth_floor) with 48 families per
# group; exports the same prompts (`audit export --beyond D`, for the coverage check); runs
# scripts/probe_v3.py. The reproduce logs keep training lines only (§9.3: the rule reads
# accuracies beyond the floor, never a phase statistic). Environment: PHASEKV (the binary;
# default target/release/phasekv). Resumable: a rerun reuses what is done.
set -euo pipefail

CAND=${1:?usage: probe_v3.sh CANDIDATE OUTDIR}
OUT=${2:?usage: probe_v3.sh CANDIDATE OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BIN=${PHASEKV:-$ROOT/target/release/phasekv}
PLAN="$ROOT/plans/probes-v3/$CAND.json"
[ -f "$PLAN" ] || { echo "unknown candidate $CAND (plans/probes-v3/: t1 ... t6)" >&2; exit 2; }
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1 OMP_NUM_THREADS=1

mkdir -p "$OUT/logs" "$OUT/exports"
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
echo "$(stamp) $CAND start" | tee -a "$OUT/logs/driver.log"
for i in 0 1; do
  ( "$BIN" reproduce --plan "$PLAN" --out "$OUT" --shard "$i/2" 2>&1 \
      | grep --line-buffered -E 'training|trained|held-out|extension|error|done' >>"$OUT/logs/shard-$i.log" ) &
done
wait
echo "$(stamp) $CAND runs done" | tee -a "$OUT/logs/driver.log"

D=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["depth_floor"])' "$PLAN")
CONFIG="$OUT/runs/full-seed100/config.json"
SEED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lab"]["seed"])' "$PLAN")
for PR in prefix in-sequence; do
  [ -e "$OUT/exports/$PR.jsonl" ] || "$BIN" audit export --config "$CONFIG" --protocol "$PR" --samples 48 \
    --seed "$SEED" --beyond "$D" --out "$OUT/exports/$PR.jsonl" >"$OUT/logs/export-$PR.log" 2>&1
done

python3 "$HERE/probe_v3.py" "$OUT" | tee "$OUT/result.txt"
echo "$(stamp) $CAND done" | tee -a "$OUT/logs/driver.log"
