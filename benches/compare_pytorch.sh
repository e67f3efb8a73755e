#!/usr/bin/env bash
# Times phasekv's candle w8s4 forward and its PyTorch-eager twin on the same sizes, one after
# the other with the same thread count, and prints the ratio. Needs `pip install torch`.
#   benches/compare_pytorch.sh [THREADS] [TOKENS]      e.g. benches/compare_pytorch.sh 1 4096,65536
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
tokens=${2:-4096,65536}
cargo build --release --quiet
export RAYON_NUM_THREADS=$threads CANDLE_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
./target/release/phasekv kernel bench --preset w8s4 --impl candle --tokens "$tokens" --json > /tmp/phasekv_bench.txt
python3 benches/pytorch_w8s4.py --tokens "$tokens" --threads "$threads" > /tmp/pytorch_bench.txt
grep -v '^{' /tmp/phasekv_bench.txt
python3 - <<'PY'
import json
ours = {r["tokens"]: r for r in map(json.loads, (l for l in open("/tmp/phasekv_bench.txt") if l.startswith("{")))}
rows = [json.loads(l) for l in open("/tmp/pytorch_bench.txt")]
sg = next(r for r in rows if r["impl"] == "pytorch-sgemm")
theirs = {r["tokens"]: r for r in rows if "tokens" in r}
first = next(iter(ours.values()))
print(f"sgemm: candle {first['sgemm_gflops']:.1f} GFLOP/s, PyTorch {sg['gflops']:.1f} GFLOP/s ({sg['cpu_capability']})")
print(f"{'T':>8} {'candle ms':>10} {'pytorch ms':>11} {'speed-up':>9} {'candle GFLOP/s':>15} {'% sgemm':>8}")
for t in sorted(ours):
    o, p = ours[t], theirs[t]
    print(f"{t:>8} {o['seconds']*1e3:>10.2f} {p['seconds']*1e3:>11.2f} {p['seconds']/o['seconds']:>8.2f}x {o['gflops']:>15.1f} {100*o['gflops']/o['sgemm_gflops']:>7.1f}%")
PY
