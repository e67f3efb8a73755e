//! Every integration test in one binary (`autotests = false` in `Cargo.toml`): one crate to
//! compile and link instead of one per file, and one pool of test threads for all of them, so a
//! file with one long test no longer leaves the other core idle. Each file of `tests/` stays a
//! module of its own; `cargo test --test suite kernel_fast::` runs one file's tests.
//!
//! Tests in different files now share a process: temporary directories carry the file's own
//! prefix and the process id, and no test sets an environment variable or a global thread pool
//! in-process (the CLI tests set them on the child processes they start).

mod common;

#[path = "adapter_mlx.rs"]
mod adapter_mlx;
#[path = "adapter_sglang.rs"]
mod adapter_sglang;
#[path = "adapter_vllm.rs"]
mod adapter_vllm;
#[path = "architecture.rs"]
mod architecture;
#[path = "claim_rules.rs"]
mod claim_rules;
#[path = "cli_kernel.rs"]
mod cli_kernel;
#[path = "cli_theory.rs"]
mod cli_theory;
#[path = "depth_floor.rs"]
mod depth_floor;
#[path = "docs_links.rs"]
mod docs_links;
#[path = "dump_format_doc.rs"]
mod dump_format_doc;
#[path = "fit_supremum.rs"]
mod fit_supremum;
#[path = "gate_cycling.rs"]
mod gate_cycling;
#[path = "hf_deepseek_v4.rs"]
mod hf_deepseek_v4;
#[path = "hostile_bounds.rs"]
mod hostile_bounds;
#[path = "hostile_disk.rs"]
mod hostile_disk;
#[path = "hostile_external.rs"]
mod hostile_external;
#[path = "hostile_input.rs"]
mod hostile_input;
#[path = "hostile_plans.rs"]
mod hostile_plans;
#[path = "hostile_report.rs"]
mod hostile_report;
#[path = "hostile_runs.rs"]
mod hostile_runs;
#[path = "kernel_external.rs"]
mod kernel_external;
#[path = "kernel_fast.rs"]
mod kernel_fast;
#[path = "kernel_invariants.rs"]
mod kernel_invariants;
#[path = "kernel_mutants.rs"]
mod kernel_mutants;
#[path = "kernel_regressions.rs"]
mod kernel_regressions;
#[path = "kernel_study.rs"]
mod kernel_study;
#[path = "kernel_tensor.rs"]
mod kernel_tensor;
#[path = "kernel_validate.rs"]
mod kernel_validate;
#[path = "kernel_validate_mutants.rs"]
mod kernel_validate_mutants;
#[path = "kernel_validate_offset.rs"]
mod kernel_validate_offset;
#[path = "kernel_validate_quantized.rs"]
mod kernel_validate_quantized;
#[path = "kernel_validate_strict.rs"]
mod kernel_validate_strict;
#[path = "kernel_validate_tolerance.rs"]
mod kernel_validate_tolerance;
#[path = "layer_layouts.rs"]
mod layer_layouts;
#[path = "ledger_v2.rs"]
mod ledger_v2;
#[path = "ledger_v3.rs"]
mod ledger_v3;
#[path = "phase_lab.rs"]
mod phase_lab;
#[path = "phase_stats.rs"]
mod phase_stats;
#[path = "phase_test_calibration.rs"]
mod phase_test_calibration;
#[path = "phase_test_stats.rs"]
mod phase_test_stats;
#[path = "phase_test_v2.rs"]
mod phase_test_v2;
#[path = "report_committed.rs"]
mod report_committed;
#[path = "report_figures.rs"]
mod report_figures;
#[path = "report_ledger.rs"]
mod report_ledger;
#[path = "report_writers.rs"]
mod report_writers;
#[path = "reproduce_jobs.rs"]
mod reproduce_jobs;
#[path = "reproduce_plans.rs"]
mod reproduce_plans;
#[path = "reproduce_sweep.rs"]
mod reproduce_sweep;
#[path = "reproduce_v3.rs"]
mod reproduce_v3;
#[path = "run_dir_and_plots.rs"]
mod run_dir_and_plots;
#[path = "seed_level.rs"]
mod seed_level;
#[path = "slurm_array.rs"]
mod slurm_array;
#[path = "theorem1.rs"]
mod theorem1;
#[path = "theorem2.rs"]
mod theorem2;
#[path = "theory_fast.rs"]
mod theory_fast;
#[path = "theory_loss.rs"]
mod theory_loss;
#[path = "theory_stagger.rs"]
mod theory_stagger;
#[path = "train_cli.rs"]
mod train_cli;
#[path = "train_extend.rs"]
mod train_extend;
#[path = "train_fast.rs"]
mod train_fast;
#[path = "train_loop.rs"]
mod train_loop;
#[path = "train_model.rs"]
mod train_model;
#[path = "train_spec.rs"]
mod train_spec;
#[path = "train_task.rs"]
mod train_task;
#[path = "triton_kernels.rs"]
mod triton_kernels;
