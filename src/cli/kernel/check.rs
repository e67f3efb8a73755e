//! `phasekv kernel check`: the invariant catalogue on the reference, the candle kernel, a mutant
//! or a kernel served by another process. Parses, calls [`phasekv::conformance::harness`], prints.

use super::args::{device, Impl};
use anyhow::bail;
use candle_core::DType;
use phasekv::conformance::harness::external::{end_process_group, ExternalKernel, ExternalOptions};
use phasekv::conformance::harness::fast_subject::FastSubject;
use phasekv::conformance::harness::subjects::{ReferenceSubject, TensorSubject};
use phasekv::conformance::harness::{
    checkable_with, run_catalogue, seeded_runner, seeded_runner_shrinking, InvariantReport, InvariantStatus,
    KernelUnderTest,
};
use phasekv::conformance::mutants::Mutant;
use phasekv::kernel::{KernelSpec, Named};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The flags of `kernel check` besides the kernel's identity.
pub struct Options {
    pub r#impl: Impl,
    pub dtype: DType,
    pub cases: u32,
    pub seed: u64,
    pub mutant: Option<String>,
    pub failures: PathBuf,
    pub shrink: u32,
    pub reply_timeout: f64,
    pub budget: f64,
}

pub fn run(
    preset: Option<String>,
    spec: Option<PathBuf>,
    external: Option<String>,
    opts: &Options,
) -> anyhow::Result<ExitCode> {
    let text = spec.as_ref().map(|p| phasekv::limits::read_text(p, phasekv::limits::MAX_JSON_BYTES)).transpose()?;
    let given = match KernelSpec::named(preset.as_deref(), text.as_deref()) {
        Ok(s) => Some(s),
        Err(Named::Neither) => None,
        Err(Named::Spec(e)) => bail!("{}: {e}", spec.unwrap_or_default().display()),
        Err(e) => return Err(e.into()),
    };
    if let Some(cmd) = external {
        return check_external(&cmd, given.as_ref(), opts);
    }
    let Some(given) = given else { bail!("give --preset NAME, --spec FILE.json or --external CMD") };
    // A staggered spec: every grid its heads sit on in the default model shape, each checked as
    // a kernel of its own (`theory/kernels.md`, "Staggered grids"); a layer layout: every layer
    // kernel of the layout ("Layer layouts"), each checked as a kernel of its own.
    let shape = phasekv::model::config::ModelConfig::default();
    let n_layer = shape.n_layer.max(given.layout_len());
    let grids = given.head_kernels(n_layer, shape.n_kv_head)?;
    for spec in &grids {
        checkable_with(spec, opts.cases, 1)?;
    }
    if given.is_layout() {
        let layers: Vec<String> = (0..given.layout_len()).map(|l| format!("{l}: {}", given.layer(l).name)).collect();
        println!(
            "layout {}: layer l uses entry l mod {} ({}); each kernel is checked",
            given.name,
            given.layout_len(),
            layers.join(", ")
        );
    }
    if given.is_staggered() {
        let offsets: Vec<String> = grids.iter().map(|g| g.geometry.offset().to_string()).collect();
        println!(
            "stagger {}: {} layers x {} KV heads sit on the grids at offsets {}; each is checked",
            given.stagger.name(),
            shape.n_layer,
            shape.n_kv_head,
            offsets.join(", ")
        );
    }
    let mut all_ok = true;
    for spec in &grids {
        all_ok &= check_grid(spec, opts)?;
    }
    Ok(verdict(all_ok))
}

/// Every invariant on one grid's kernel, for each implementation asked for; whether all held.
fn check_grid(spec: &KernelSpec, opts: &Options) -> anyhow::Result<bool> {
    let spec = spec.clone();
    let mut subjects: Vec<Box<dyn KernelUnderTest>> = Vec::new();
    match &opts.mutant {
        Some(name) => subjects.push(Box::new(ReferenceSubject::mutant(&spec, Mutant::from_name(name)?))),
        None => {
            if opts.r#impl.reference() {
                subjects.push(Box::new(ReferenceSubject::new(&spec)));
            }
            if opts.r#impl.candle() {
                subjects.push(Box::new(TensorSubject::new(&spec, opts.dtype, &device())));
            }
            if opts.r#impl.fast() {
                if opts.dtype != candle_core::DType::F32 {
                    bail!("invalid --dtype: the fast kernel computes in f32 only, got {:?}", opts.dtype);
                }
                subjects.push(Box::new(FastSubject::new(&spec)));
            }
        }
    }
    println!("preset {}: {}", spec.grid_label(), spec.describe());
    println!("{} cases per invariant, seed {}", opts.cases, opts.seed);
    let mut all_ok = true;
    for subject in &subjects {
        println!("\n== {} ==", subject.label());
        print_header();
        let reports = run_catalogue(subject.as_ref(), &|| seeded_runner(opts.cases, opts.seed), &mut print_row)?;
        all_ok &= reports.iter().all(|r| r.status != InvariantStatus::Fail);
    }
    Ok(all_ok)
}

/// `kernel check --external CMD`: every invariant against the process, one start; each failure's
/// shrunk case written as a dump under `failures`. A process that breaks the protocol, dies or
/// goes silent ends the run with one line (exit status 2); a first SIGINT, SIGTERM or SIGHUP ends
/// it at once (130, 143 or 129); the process group is ended on every path.
fn check_external(cmd: &str, given: Option<&KernelSpec>, opts: &Options) -> anyhow::Result<ExitCode> {
    let Options { cases, seed, shrink, reply_timeout, budget, .. } = *opts;
    let failures = opts.failures.as_path();
    refuse_non_empty(failures)?;
    let ext = ExternalOptions {
        reply_timeout: Duration::from_secs_f64(reply_timeout),
        budget: Duration::from_secs_f64(budget),
        stop: crate::cli::signals::interrupted,
    };
    let kernel = match ExternalKernel::start(cmd, ext) {
        Ok(k) => k,
        Err(_) if crate::cli::signals::interrupted() => stop_now(None),
        Err(e) => return Err(e.into()),
    };
    // The main thread may be computing the reference between requests: a watcher ends the
    // process group and exits as soon as a first signal arrives.
    let group = kernel.process_group();
    std::thread::spawn(move || loop {
        if crate::cli::signals::interrupted() {
            stop_now(Some(group));
        }
        std::thread::sleep(Duration::from_millis(25));
    });
    let spec = kernel.spec().clone();
    if let Some(g) = given.filter(|g| **g != spec) {
        let (a, b) = ((&spec.name, spec.describe()), (&g.name, g.describe()));
        bail!("invalid --external: the process serves {} ({}) but --preset/--spec gives {} ({})", a.0, a.1, b.0, b.1);
    }
    // The work of the run, with the heads the process runs (its hello's min_d_head).
    checkable_with(&spec, cases, kernel.min_d_head())?;
    println!("preset {}: {}", spec.name, spec.describe());
    println!("{cases} cases per invariant, seed {seed}");
    println!("\n== {} ({:?}, one process: {cmd}) ==", kernel.label(), kernel.dtype());
    print_header();
    let reports = run_catalogue(&kernel, &|| seeded_runner_shrinking(cases, seed, shrink), &mut print_row)?;
    let failed: Vec<_> = reports.into_iter().filter_map(|r| r.counterexample.map(|c| (r.invariant, c))).collect();
    if !failed.is_empty() {
        std::fs::create_dir_all(failures).map_err(|e| phasekv::Error::io(failures, e))?;
    }
    for (inv, case) in &failed {
        let path = failures.join(format!("{}.safetensors", inv.id()));
        let (t, dims) = (case.x.nrows(), case.dims);
        let windows = spec.geometry.num_windows(t);
        println!(
            "\ncounterexample {} ({}): T = {t}, d = {}, d_h = {}, {windows} window(s)",
            inv.id(),
            inv.name(),
            dims.d_model,
            dims.d_head
        );
        match kernel.save_counterexample(case, &path) {
            Ok(()) => println!("  replay: phasekv kernel validate {}", path.display()),
            Err(e) => match kernel.broken() {
                Some(b) => return Err(b.into()),
                None => println!("  (no dump written: {e})"),
            },
        }
    }
    Ok(verdict(failed.is_empty()))
}

/// After a first SIGINT, SIGTERM or SIGHUP: ends the kernel's process group, says so, exits
/// 130, 143 or 129.
fn stop_now(group: Option<u32>) -> ! {
    if let Some(g) = group {
        end_process_group(g);
    }
    let (name, code) = crate::cli::signals::interrupted_by();
    eprintln!("interrupted by {name}: stopped at once; the kernel's process group was ended");
    std::process::exit(code as i32)
}

/// `--failures` must be new or empty: a second run's dumps never mix with a first run's.
fn refuse_non_empty(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => bail!(
            "invalid --failures: {} exists and is not empty (it holds another run's counterexamples); \
             give a new directory or remove it",
            dir.display()
        ),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(phasekv::Error::io(dir, e).into()),
    }
}

fn verdict(ok: bool) -> ExitCode {
    println!();
    if ok {
        println!("verdict: every invariant holds");
        ExitCode::SUCCESS
    } else {
        println!("verdict: FAILED");
        ExitCode::from(1)
    }
}

fn print_header() {
    let h = ("id", "invariant", "", "passed", "n/a", "max error", "bound");
    println!("{:<4} {:<20} {:<5} {:>7} {:>5} {:>11} {:>11}  note", h.0, h.1, h.2, h.3, h.4, h.5, h.6);
}

fn print_row(r: &InvariantReport, secs: f64) {
    let note = match &r.failure {
        Some(f) => f.clone(),
        None if r.status == InvariantStatus::NotApplicable => "not applicable to this kernel".to_string(),
        None => format!("{secs:.2}s"),
    };
    let (inv, status) = (r.invariant, r.status.word().to_uppercase());
    println!(
        "{:<4} {:<20} {:<5} {:>7} {:>5} {:>11.3e} {:>11.3e}  {note}",
        inv.id(),
        inv.name(),
        status,
        r.cases_passed,
        r.cases_not_applicable,
        r.worst_error,
        r.bound_at_worst
    );
}
