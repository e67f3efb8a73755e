//! Gradient flow is the theory engine's hot loop. Benchmarks one run to convergence and 64
//! seeds in parallel (rayon) at H=3, S=8, L=4, N=256, beta=gamma=2, sigma=0.01 (issue 3's
//! target: 64 seeds in under 10 s), plus one static loss-gradient evaluation.

use criterion::{criterion_group, criterion_main, Criterion};
use phasekv::theory::flow::{run_flow, run_seeds, FlowConfig};
use phasekv::theory::task::{static_loss_grad, StaticWorkspace, TaskParams};
use std::hint::black_box;

fn config() -> FlowConfig {
    FlowConfig { params: TaskParams::secondary(), sigma: 0.01, t_max: 10_000.0, ..FlowConfig::default() }
}

fn bench(c: &mut Criterion) {
    let cfg = config();
    let p = cfg.params;
    let mut g = c.benchmark_group("theory_flow");
    g.sample_size(10);
    g.bench_function("static_loss_grad H3 S8", |b| {
        let key = vec![1.0 / 8.0; 24];
        let value = vec![1.0 / 8.0; 24];
        let mut ws = StaticWorkspace::new(3, 8);
        let (mut gk, mut gv) = (vec![0.0; 24], vec![0.0; 24]);
        b.iter(|| static_loss_grad(black_box(&p), &key, &value, &mut ws, Some((&mut gk, &mut gv))))
    });
    g.bench_function("one run to convergence H3 S8 L4 N256", |b| {
        b.iter(|| run_flow(black_box(&cfg), 7, true).unwrap())
    });
    let seeds: Vec<u64> = (0..64).collect();
    g.bench_function("64 seeds rayon H3 S8 L4 N256", |b| b.iter(|| run_seeds(black_box(&cfg), &seeds, || {}).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
