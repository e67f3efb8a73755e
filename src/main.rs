//! The `phasekv` command-line tool: parse, call the library, print.

mod cli;

/// mimalloc: glibc malloc maps and unmaps candle's large temporaries on every op (page faults
/// and memset dominated the training-step profile); mimalloc keeps them (measured in
/// theory/training.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v2's option enum (not exported by libmimalloc-sys).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    // Never return freed pages to the OS: candle allocates and frees the same large
    // temporaries every step, and purged pages come back as page faults plus kernel zeroing
    // (18 % of a w8s4 training step in perf); keeping them made steps 25-30 % faster.
    // SAFETY: sets a plain integer option; mimalloc reads options on every purge decision.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    cli::main()
}
