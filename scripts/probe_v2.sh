#!/usr/bin/env bash
# The probes of theory/phase-lab.md §8.1 (issue 32) for one candidate, then the rule's script.
#
#   scripts/probe_v2.sh CANDIDATE OUTDIR        CANDIDATE in V1 .. V16
#
# Configs: `phasekv train --print-config --preset P` (the committed task, plans/full.json's
# `run.task` over the defaults, on the fast engine) with recipe R2 (`train.warmup_steps` 300,
# `train.steps` 3000) and then the candidate's change of task, model and train fields over it. Trains `full`
# seeds 100, 101, 102 and `w8s4`, `w8s4-norope` seed 100; evaluates w8s4 and w8s4-norope under
# both protocols with 48 prompts per group; exports the same prompts (`audit export`, for the
# coverage check); runs scripts/probe_v2.py. At most 2 processes at once, one thread each.
#
# `phasekv eval` prints per-group accuracies and phase statistics: its stdout goes to
# /dev/null, never to a file or the terminal (§8.1: the rule reads accuracies only, through the
# script). Environment: PHASEKV (the binary; default /work/main/target/release/phasekv).
set -euo pipefail

CAND=${1:?usage: probe_v2.sh CANDIDATE OUTDIR}
OUT=${2:?usage: probe_v2.sh CANDIDATE OUTDIR}
BIN=${PHASEKV:-/work/main/target/release/phasekv}
HERE=$(cd "$(dirname "$0")" && pwd)
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1 OMP_NUM_THREADS=1

# Each candidate: a change of the config's sections (task, model, train) over V1's task and R2.
case "$CAND" in
  V1) CHANGE='{"task": {"max_gap": 0}}' ;;
  V2) CHANGE='{"task": {"max_gap": 0, "n_records": 12}}' ;;
  V3) CHANGE='{"task": {"max_gap": 0, "val_len": 2}}' ;;
  V4) CHANGE='{"task": {"max_gap": 0, "n_records": 12, "val_len": 2}}' ;;
  # The second list (§8.1, written 2026-12-03 09:02 UTC before any of its probes ran).
  V5) CHANGE='{"task": {"max_gap": 0}, "model": {"d_head": 16}}' ;;
  V6) CHANGE='{"task": {"max_gap": 0}, "model": {"d_head": 8}}' ;;
  V7) CHANGE='{"task": {"max_gap": 0, "n_records": 10}, "model": {"d_head": 16}}' ;;
  V8) CHANGE='{"task": {"max_gap": 0}, "train": {"steps": 2000}}' ;;
  # The third list (§8.1, written 2026-12-03 09:16 UTC before any of its probes ran).
  V9) CHANGE='{"task": {"max_gap": 0}, "model": {"local_window": 2}}' ;;
  V10) CHANGE='{"task": {"max_gap": 0}, "model": {"local_window": 1}}' ;;
  V11) CHANGE='{"task": {"max_gap": 0}, "model": {"local_window": 2}, "train": {"steps": 2000}}' ;;
  V12) CHANGE='{"task": {"max_gap": 0}, "model": {"local_window": 1}, "train": {"steps": 2000}}' ;;
  # The fourth list (§8.1, written 2026-12-03 09:33 UTC before any of its probes ran).
  V13) CHANGE='{"task": {"max_gap": 0}, "model": {"d_head": 16}, "train": {"curriculum_steps": 1000}}' ;;
  V14) CHANGE='{"task": {"max_gap": 0, "n_key": 64, "n_val": 64}}' ;;
  V15) CHANGE='{"task": {"max_gap": 0, "n_key": 64, "n_val": 64}, "model": {"d_head": 16}, "train": {"curriculum_steps": 1000}}' ;;
  V16) CHANGE='{"task": {"max_gap": 0}, "model": {"d_head": 8}, "train": {"curriculum_steps": 1000}}' ;;
  *) echo "unknown candidate $CAND (V1..V16)" >&2; exit 2 ;;
esac

mkdir -p "$OUT/configs" "$OUT/logs" "$OUT/exports"
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
echo "$(stamp) $CAND start: task change $CHANGE, recipe R2" | tee -a "$OUT/logs/driver.log"

# Configs (one per preset), validated by the binary.
for P in full w8s4 w8s4-norope; do
  "$BIN" train --print-config --preset "$P" | python3 -c '
import json, sys
c = json.load(sys.stdin)
c["train"]["warmup_steps"] = 300
c["train"]["steps"] = 3000
for section, change in json.loads(sys.argv[1]).items():
    c[section].update(change)
json.dump(c, open(sys.argv[2], "w"), indent=2)
' "$CHANGE" "$OUT/configs/$P.json"
  if ! "$BIN" train --config "$OUT/configs/$P.json" --print-config >/dev/null 2>"$OUT/logs/validate-$P.log"; then
    echo "$(stamp) $CAND: config refused for $P: $(cat "$OUT/logs/validate-$P.log")" | tee -a "$OUT/logs/driver.log"
    exit 3
  fi
done

# Up to 2 jobs at once: run_jobs CMD... (each a shell string).
run_jobs() {
  local pids=() fail=0 p
  for cmd in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
    bash -c "$cmd" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  return $fail
}

train_cmd() { # preset seed
  local d="$OUT/$1-seed$2"
  [ -e "$d/metrics.json" ] && { echo "true"; return; }  # finished (a rerun of the driver)
  echo "s=\$(date +%s); '$BIN' train --config '$OUT/configs/$1.json' --seed $2 --out '$d' --quiet >'$OUT/logs/train-$1-seed$2.log' 2>&1; rc=\$?; echo \"\$(date -u +%Y-%m-%dT%H:%M:%SZ) train $1 seed $2 rc \$rc wall \$((\$(date +%s)-s)) s\" >>'$OUT/logs/driver.log'; exit \$rc"
}
eval_cmd() { # preset protocol  (stdout holds phase statistics: discarded)
  local d="$OUT/$1-seed100"
  echo "s=\$(date +%s); '$BIN' eval '$d' --protocol $2 --samples 48 >/dev/null 2>'$OUT/logs/eval-$1-$2.err'; rc=\$?; echo \"\$(date -u +%Y-%m-%dT%H:%M:%SZ) eval $1 $2 rc \$rc wall \$((\$(date +%s)-s)) s\" >>'$OUT/logs/driver.log'; exit \$rc"
}

run_jobs "$(train_cmd full 100)" "$(train_cmd full 101)" "$(train_cmd full 102)" \
  "$(train_cmd w8s4 100)" "$(train_cmd w8s4-norope 100)"

# Two evaluations of one run directory at once are refused (its lock): one protocol at a time.
for PR in prefix in-sequence; do
  run_jobs "$(eval_cmd w8s4 $PR)" "$(eval_cmd w8s4-norope $PR)"
done

for PR in prefix in-sequence; do
  [ -e "$OUT/exports/$PR.jsonl" ] || "$BIN" audit export --config "$OUT/configs/full.json" --protocol "$PR" \
    --samples 48 --out "$OUT/exports/$PR.jsonl" >"$OUT/logs/export-$PR.log" 2>&1
done

python3 "$HERE/probe_v2.py" "$OUT" | tee "$OUT/result.txt"
echo "$(stamp) $CAND done" | tee -a "$OUT/logs/driver.log"
