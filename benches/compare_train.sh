#!/usr/bin/env bash
# One training step of phasekv's candle engine, its fast engine and the PyTorch twin
# (benches/pytorch_train.py) eager and `torch.compile`d (inductor), on the same workload (the twin
# reads its sizes from `phasekv train --print-config`), one thread each, alternating in rounds so
# that load drifts hit all four alike. Prints the median step of each, the ratios, and GFLOP/s (phasekv's
# `flops_per_step` for all three) next to the best single-thread sgemm rate measured in the same
# run (PyTorch's, candle's or the gemm crate's). Needs torch. The twin implements `full` and `w8s4`;
# any other preset (e.g. dsv4-csa) runs candle and fast side by side only (the "vs candle" column).
#   benches/compare_train.sh [STEPS] [ROUNDS] [PRESETS]     e.g. benches/compare_train.sh 30 3 full,w8s4
#   benches/compare_train.sh 30 3 dsv4-csa                  fast against candle on DeepSeek-V4's CSA
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
rounds=${2:-3}
presets=${3:-full,w8s4}
cargo build --release --quiet --bin phasekv
bin=${CARGO_TARGET_DIR:-target}/release/phasekv
export RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
lines=$(mktemp)
for _ in $(seq "$rounds"); do
  for p in ${presets//,/ }; do
    "$bin" train --preset "$p" --bench "$steps" --engine candle >> "$lines"
    if "$bin" train --preset "$p" --engine fast --print-config > /dev/null 2>&1; then
      "$bin" train --preset "$p" --bench "$steps" --engine fast >> "$lines"
    fi
    case "$p" in
      full|w8s4)
        "$bin" train --preset "$p" --print-config | python3 benches/pytorch_train.py --config - --steps "$steps" --threads 1 >> "$lines"
        "$bin" train --preset "$p" --print-config | python3 benches/pytorch_train.py --config - --steps "$steps" --threads 1 --compile >> "$lines"
        ;;
    esac
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# phasekv's own 1-thread sgemm rates (candle's and the gemm crate's, the GEMM of the fast engine),
# so that "% sgemm" is against the best GEMM this CPU ran, not PyTorch's alone (on an AMD EPYC
# PyTorch's MKL sgemm reached 105 GFLOP/s, the gemm crate 255).
ours_sgemm=$("$bin" kernel bench --impl fast --tokens 64 --seconds 1 --json | grep '^{' | head -1)
python3 - "$lines" "$ours_sgemm" <<'PY'
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
a, b = torch.randn(512, 512), torch.randn(512, 512)
for _ in range(3):
    a @ b
t0 = time.perf_counter(); n = 20
for _ in range(n):
    a @ b
torch_sgemm = 2 * 512**3 * n / (time.perf_counter() - t0) / 1e9
ours = json.loads(sys.argv[2])
sgemm = max(torch_sgemm, ours["candle_sgemm_gflops"], ours["gemm_sgemm_gflops"])
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["preset"], r["impl"]), []).append(r)
print(f"best sgemm, 1 thread: {sgemm:.1f} GFLOP/s (PyTorch 512^3 {torch_sgemm:.1f}, candle {ours['candle_sgemm_gflops']:.1f}, "
      f"gemm crate {ours['gemm_sgemm_gflops']:.1f}); % sgemm is against the best")
print(f"{'preset':<8} {'impl':<19} {'median s':>9} {'rounds':>6} {'GFLOP/s':>8} {'% sgemm':>8} {'vs candle':>10} {'vs eager':>10} {'vs compile':>10}")
for preset in sorted({p for p, _ in by}):
    ref = [r for r in by if r[0] == preset and r[1].startswith("candle")][0]
    flops = by[ref][0]["flops_per_step"]
    want = {k: by[ref][0][k] for k in ("seq_len", "vocab", "tokens_per_step")}
    torch_rows = by.get((preset, "pytorch-eager-f32"), []) + by.get((preset, "pytorch-compile-f32"), [])
    for r in torch_rows:
        got = {k: r[k] for k in want}
        if got != want:
            sys.exit(f"error: the twin's workload {got} is not phasekv's {want}")
    med = {i: statistics.median(r["median_s"] for r in rs) for (p, i), rs in by.items() if p == preset}
    pca, pt, pc = med.get("candle-f32"), med.get("pytorch-eager-f32"), med.get("pytorch-compile-f32")
    for impl, s in sorted(med.items()):
        g = flops / s / 1e9
        ratio_ca = f"{pca / s:.2f}x" if pca else "-"
        ratio = f"{pt / s:.2f}x" if pt else "-"
        ratio_c = f"{pc / s:.2f}x" if pc else "-"
        print(f"{preset:<8} {impl:<19} {s:>9.4f} {len(by[(preset, impl)]):>6} {g:>8.1f} {100 * g / sgemm:>7.1f}% {ratio_ca:>10} {ratio:>10} {ratio_c:>10}")
PY
rm -f "$lines"
