//! The `phasekv` command-line tool: parse, call the library, print.

mod cli;

/// mimalloc: glibc malloc maps and unmaps candle's large temporaries on every op (page faults
/// and memset dominated the training-step profile); mimalloc keeps them (measured in
/// theory/training.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
