#!/usr/bin/env bash
# The compressor forward side by side: candle (`--impl candle`), the fast CPU kernel
# (`--impl fast`) and the PyTorch-eager twin (benches/pytorch_w8s4.py), alternating
# (candle, fast, PyTorch, then again) at each thread count, in one run. Prints, per row, the
# median over rounds, the speed-up over PyTorch and the GFLOP/s achieved next to the best sgemm
# measured in the same run at that thread count (candle's and PyTorch's at that count, the `gemm`
# crate's on one thread). Needs `pip install torch`.
#   benches/compare_pytorch.sh [THREADS] [TOKENS] [ROUNDS] [SECONDS]
#   e.g. benches/compare_pytorch.sh 1,2 4096,65536 2 1
set -euo pipefail
cd "$(dirname "$0")/.."
threads_list=${1:-1,2}
tokens=${2:-4096,65536}
rounds=${3:-2}
seconds=${4:-1}
# The sizes, in one place: both sides read them from here; window and stride come from phasekv's
# preset; the FLOP count of every row is phasekv's (`kernel::forward_flops`).
preset=w8s4
d_model=128
d_head=64
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/phasekv
read -r window stride < <("$bin" kernel list --json "$preset" |
  python3 -c 'import json,sys; g=json.load(sys.stdin)["geometry"]; print(g["window"], g["stride"])')
out=$(mktemp -d)
echo "preset $preset (W = $window, S = $stride), d = $d_model, d_h = $d_head, f32; T = $tokens; $rounds round(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  for th in ${threads_list//,/ }; do
    export RAYON_NUM_THREADS=$th CANDLE_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th
    for impl in candle fast; do
      "$bin" kernel bench --preset "$preset" --impl "$impl" --tokens "$tokens" --d-model "$d_model" \
        --d-head "$d_head" --seconds "$seconds" --json | grep '^{' >> "$out/rows.jsonl"
    done
    python3 benches/pytorch_w8s4.py --tokens "$tokens" --threads "$th" --d-model "$d_model" --d-head "$d_head" \
      --window "$window" --stride "$stride" --seconds "$seconds" | sed "s/^{/{\"round\": $round, \"threads_asked\": $th, /" >> "$out/rows.jsonl"
  done
done
python3 - "$out/rows.jsonl" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
ours = [r for r in rows if r["impl"] in ("candle-f32", "fast-f32")]
torch_rows = [r for r in rows if r["impl"] == "pytorch-eager-f32"]
sg = [r for r in rows if r["impl"] == "pytorch-sgemm"]
flops = {r["tokens"]: r["flops"] for r in ours}
th_of = lambda r: r.get("threads_asked", r["threads"])
peak = collections.defaultdict(float)  # best sgemm GFLOP/s per thread count, this run
for r in ours:
    peak[r["threads"]] = max(peak[r["threads"]], r["candle_sgemm_gflops"], r["gemm_sgemm_gflops"])
for r in sg:
    peak[th_of(r)] = max(peak[th_of(r)], r["gflops"])
print("best sgemm this run (GFLOP/s): " + ", ".join(
    f"{t} thread(s) {peak[t]:.1f} [candle {max(r['candle_sgemm_gflops'] for r in ours if r['threads'] == t):.1f}, "
    f"gemm 1-thread {max(r['gemm_sgemm_gflops'] for r in ours if r['threads'] == t):.1f}, "
    f"PyTorch {max(r['gflops'] for r in sg if th_of(r) == t):.1f} ({sg[0]['cpu_capability']})]" for t in sorted(peak)))
med = collections.defaultdict(list)
for r in ours:
    med[(r["impl"], r["threads"], r["tokens"])].append(r["seconds"])
for r in torch_rows:
    med[("pytorch-eager", th_of(r), r["tokens"])].append(r["seconds"])
print(f"{'impl':<14} {'threads':>7} {'T':>7} {'ms':>9} {'runs':>9} {'vs PyTorch':>11} {'GFLOP/s':>8} {'% sgemm':>8}")
for (impl, th, t) in sorted(med, key=lambda k: (k[1], k[2], k[0])):
    secs = statistics.median(med[(impl, th, t)])
    spread = "/".join(f"{s*1e3:.0f}" for s in med[(impl, th, t)])
    ratio = statistics.median(med[("pytorch-eager", th, t)]) / secs
    gf = flops[t] / secs / 1e9
    print(f"{impl:<14} {th:>7} {t:>7} {secs*1e3:>9.2f} {spread:>9} {ratio:>10.2f}x {gf:>8.1f} {100*gf/peak[th]:>7.1f}%")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -r "$out"
