//! Gradient flow is the theory engine's hot loop (theory/induction-model.md §8). At H=3, S=8,
//! L=4, N=256, beta=gamma=2, sigma=0.01:
//!
//! 1. side by side, in one process and alternating (so both see the same machine load): the
//!    fast kernel and the reference kernel (`FlowKernel::Reference`, the implementation before
//!    issue 13), microseconds per RK4 step over whole runs to convergence, and the wall time of
//!    512 seeds on a 2-thread rayon pool; printed as a table with the ratio;
//! 2. criterion timings of one static loss-gradient evaluation (both kernels), one run to
//!    convergence and 64 seeds.
//!
//! `cargo bench --bench theory_flow` (release). Set `THEORY_FLOW_ROUNDS` to change the number
//! of alternating rounds (default 5).

use criterion::{criterion_group, Criterion};
use phasekv::theory::fast::FastStatic;
use phasekv::theory::flow::{run_flow_with, run_seeds, run_seeds_with, FlowConfig, FlowKernel};
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

/// Microseconds per RK4 step, over runs to convergence of seeds 0..16.
fn us_per_step(cfg: &FlowConfig, kernel: FlowKernel) -> f64 {
    let start = Instant::now();
    let mut steps = 0usize;
    for seed in 0..16 {
        steps += run_flow_with(black_box(cfg), seed, true, kernel).unwrap().steps;
    }
    start.elapsed().as_secs_f64() * 1e6 / steps as f64
}

fn seeds_512_seconds(cfg: &FlowConfig, kernel: FlowKernel, pool: &rayon::ThreadPool) -> f64 {
    let seeds: Vec<u64> = (0..512).collect();
    let start = Instant::now();
    let runs = pool.install(|| run_seeds_with(black_box(cfg), &seeds, kernel, || {}).unwrap());
    assert_eq!(runs.len(), 512);
    start.elapsed().as_secs_f64()
}

fn side_by_side() {
    let cfg = config();
    let rounds: usize = std::env::var("THEORY_FLOW_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let (mut step_fast, mut step_ref, mut all_fast, mut all_ref) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        step_fast.push(us_per_step(&cfg, FlowKernel::Fast));
        step_ref.push(us_per_step(&cfg, FlowKernel::Reference));
        all_fast.push(seeds_512_seconds(&cfg, FlowKernel::Fast, &pool));
        all_ref.push(seeds_512_seconds(&cfg, FlowKernel::Reference, &pool));
    }
    let (sf, sr) = (median(&mut step_fast), median(&mut step_ref));
    let (af, ar) = (median(&mut all_fast), median(&mut all_ref));
    println!("side by side, H=3 S=8 L=4 N=256, RK4 dt=2, medians of {rounds} alternating rounds:");
    println!("  us per RK4 step   fast {sf:.3}   reference {sr:.3}   speed-up {:.2}x", sr / sf);
    println!("  512 seeds, 2 thr  fast {af:.3} s  reference {ar:.3} s  speed-up {:.2}x", ar / af);
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
    benches();
    Criterion::default().configure_from_args().final_summary();
}
