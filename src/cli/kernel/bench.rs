//! `phasekv kernel bench`: parses, calls [`phasekv::conformance::bench`], prints.

use super::args::Impl;
use phasekv::conformance::bench::{self, BenchRow};
use phasekv::kernel::KernelSpec;

pub fn run(
    preset: &str,
    tokens: &[usize],
    d_model: usize,
    d_head: usize,
    which: Impl,
    seconds: f64,
    json: bool,
) -> anyhow::Result<()> {
    let spec = KernelSpec::named(Some(preset), None)?;
    let dims = bench::check_inputs(tokens, d_model, d_head, seconds)?;
    let threads = rayon::current_num_threads();
    println!("preset {preset}: {}", spec.describe());
    println!("d = {d_model}, d_h = {d_head}, f32, {threads} thread(s); timing, then the sgemm rates ...");
    println!("{:<14} {:>8} {:>11} {:>13} {:>9} {:>8}", "impl", "T", "ms/forward", "tokens/s", "GFLOP/s", "% sgemm");
    let which = bench::Which { reference: which.reference(), candle: which.candle(), fast: which.fast() };
    let sgemm = bench::run(&spec, dims, tokens, which, seconds, &mut |r: &BenchRow| {
        println!(
            "{:<14} {:>8} {:>11.3} {:>13.0} {:>9.2} {:>7.1}%",
            r.implementation,
            r.tokens,
            r.seconds * 1e3,
            r.tokens_per_s,
            r.gflops,
            100.0 * r.gflops / r.sgemm_gflops
        );
        if json {
            println!("{}", serde_json::to_string(r).expect("a bench row serialises"));
        }
    })?;
    println!(
        "sgemm on this machine (measured after the kernels): candle {:.1}, gemm crate (1 thread) {:.1} GFLOP/s",
        sgemm.candle / 1e9,
        sgemm.gemm / 1e9
    );
    Ok(())
}
