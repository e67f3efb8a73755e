//! The `phasekv` command-line tool: parse, call the library, print.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
