//! Gradient flow is the theory engine's hot loop (theory/induction-model.md §8). At H=3, S=8,
//! L=4, N=256, beta=gamma=2, sigma=0.01, RK4 dt=2:
//!
//! 1. side by side, in one process and alternating (so all see the same machine load): the
//!    reference kernel (`FlowKernel::Reference`, the implementation before issue 13), the fast
//!    kernel on one seed at a time (`run_flow`), and the fast kernel with 8 seeds per vector
//!    register (`run_seeds`, one thread): microseconds per RK4 step of one seed over whole runs
//!    to convergence of seeds 0..32; then the wall time of 512 seeds on a 2-thread rayon pool,
//!    fast (batched) and reference, and whether every one of the 512 runs agrees (same
//!    convergence, offsets and time; largest gate and loss differences); printed with ratios;
//! 2. criterion timings of one static loss-gradient evaluation (both kernels), one run to
//!    convergence and 64 seeds.
//!
//! `cargo bench --bench theory_flow` (release). Set `THEORY_FLOW_ROUNDS` to change the number
//! of alternating rounds (default 5); `THEORY_FLOW_SIDE_BY_SIDE_ONLY=1` skips criterion.

use criterion::{criterion_group, Criterion};
use phasekv::theory::fast::{FastStatic, Isa};
use phasekv::theory::flow::{run_flow_with, run_seeds, run_seeds_with, FlowConfig, FlowKernel, FlowRun};
use phasekv::theory::task::{static_loss_grad, StaticWorkspace, TaskParams};
use std::hint::black_box;
use std::time::Instant;

fn config() -> FlowConfig {
    FlowConfig { params: TaskParams::secondary(), sigma: 0.01, t_max: 10_000.0, ..FlowConfig::default() }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seeds whose runs to convergence time one RK4 step.
const STEP_SEEDS: u64 = 32;

/// Microseconds per RK4 step of one seed, one seed at a time, over runs of seeds 0..32.
fn us_per_step_one_by_one(cfg: &FlowConfig, kernel: FlowKernel) -> f64 {
    let start = Instant::now();
    let mut steps = 0usize;
    for seed in 0..STEP_SEEDS {
        steps += run_flow_with(black_box(cfg), seed, true, kernel).unwrap().steps;
    }
    start.elapsed().as_secs_f64() * 1e6 / steps as f64
}

/// Microseconds per RK4 step of one seed, seeds 0..32 batched in vector lanes, one thread.
fn us_per_step_batched(cfg: &FlowConfig, one_thread: &rayon::ThreadPool) -> f64 {
    let seeds: Vec<u64> = (0..STEP_SEEDS).collect();
    let start = Instant::now();
    let runs = one_thread.install(|| run_seeds_with(black_box(cfg), &seeds, FlowKernel::Fast, || {}).unwrap());
    let steps: usize = runs.iter().map(|r| r.steps).sum();
    start.elapsed().as_secs_f64() * 1e6 / steps as f64
}

fn seeds_512(cfg: &FlowConfig, kernel: FlowKernel, pool: &rayon::ThreadPool) -> (f64, Vec<FlowRun>) {
    let seeds: Vec<u64> = (0..512).collect();
    let start = Instant::now();
    let runs = pool.install(|| run_seeds_with(black_box(cfg), &seeds, kernel, || {}).unwrap());
    assert_eq!(runs.len(), 512);
    (start.elapsed().as_secs_f64(), runs)
}

/// Runs whose convergence, offsets or convergence time differ; largest gate and final-loss
/// differences.
fn compare(fast: &[FlowRun], reference: &[FlowRun]) -> (usize, f64, f64) {
    let mut differ = 0;
    let (mut gate, mut loss) = (0.0f64, 0.0f64);
    for (a, b) in fast.iter().zip(reference) {
        assert_eq!(a.seed, b.seed);
        if (a.converged, &a.key_offsets, a.t_conv) != (b.converged, &b.key_offsets, b.t_conv) {
            differ += 1;
        }
        for (x, y) in a.key.iter().zip(&b.key).chain(a.value.iter().zip(&b.value)) {
            gate = gate.max((x - y).abs());
        }
        loss = loss.max((a.final_loss - b.final_loss).abs() / b.final_loss.abs());
    }
    (differ, gate, loss)
}

fn side_by_side() {
    let cfg = config();
    let rounds: usize = std::env::var("THEORY_FLOW_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let (mut step_ref, mut step_one, mut step_batch) = (vec![], vec![], vec![]);
    let (mut all_fast, mut all_ref) = (vec![], vec![]);
    let mut agreement = (0, 0.0f64, 0.0f64);
    let mut converged = 0;
    for _ in 0..rounds {
        step_ref.push(us_per_step_one_by_one(&cfg, FlowKernel::Reference));
        step_one.push(us_per_step_one_by_one(&cfg, FlowKernel::Fast));
        step_batch.push(us_per_step_batched(&cfg, &one));
        let (tf, fast) = seeds_512(&cfg, FlowKernel::Fast, &two);
        let (tr, reference) = seeds_512(&cfg, FlowKernel::Reference, &two);
        all_fast.push(tf);
        all_ref.push(tr);
        let (d, g, l) = compare(&fast, &reference);
        agreement = (agreement.0.max(d), agreement.1.max(g), agreement.2.max(l));
        converged = fast.iter().filter(|r| r.converged).count();
    }
    let (sr, so, sb) = (median(&mut step_ref), median(&mut step_one), median(&mut step_batch));
    let (af, ar) = (median(&mut all_fast), median(&mut all_ref));
    println!("side by side, H=3 S=8 L=4 N=256, RK4 dt=2, {:?}, medians of {rounds} alternating rounds:", Isa::detect());
    println!("  us per RK4 step of one seed (seeds 0..{STEP_SEEDS} to convergence, one thread):");
    println!("    reference                    {sr:.3}");
    println!("    fast, one seed at a time     {so:.3}   speed-up {:.2}x", sr / so);
    println!("    fast, 8 seeds per register   {sb:.3}   speed-up {:.2}x", sr / sb);
    println!("  512 seeds, 2 threads          fast {af:.3} s   reference {ar:.3} s   speed-up {:.2}x", ar / af);
    println!(
        "  512 seeds agree: {} of 512 differ in convergence, offsets or time ({converged} converged); \
         largest gate difference {:.1e}, relative final-loss difference {:.1e}",
        agreement.0, agreement.1, agreement.2
    );
}

fn bench(c: &mut Criterion) {
    let cfg = config();
    let p = cfg.params;
    let mut g = c.benchmark_group("theory_flow");
    g.sample_size(10);
    g.bench_function("static_loss_grad H3 S8 (reference)", |b| {
        let key = vec![1.0 / 8.0; 24];
        let value = vec![1.0 / 8.0; 24];
        let mut ws = StaticWorkspace::new(3, 8);
        let (mut gk, mut gv) = (vec![0.0; 24], vec![0.0; 24]);
        b.iter(|| static_loss_grad(black_box(&p), &key, &value, &mut ws, Some((&mut gk, &mut gv))))
    });
    g.bench_function("fast loss and logit gradient H3 S8", |b| {
        let theta = vec![0.0; 48];
        let mut out = vec![0.0; 48];
        let mut fast = FastStatic::new(3, 8);
        b.iter(|| fast.eval(black_box(&p), &theta, &mut out))
    });
    g.bench_function("one run to convergence H3 S8 L4 N256", |b| {
        b.iter(|| run_flow_with(black_box(&cfg), 7, true, FlowKernel::Fast).unwrap())
    });
    let seeds: Vec<u64> = (0..64).collect();
    g.bench_function("64 seeds rayon H3 S8 L4 N256", |b| b.iter(|| run_seeds(black_box(&cfg), &seeds, || {}).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    side_by_side();
    if std::env::var_os("THEORY_FLOW_SIDE_BY_SIDE_ONLY").is_some() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
