//! The signals that stop a run (SIGINT, SIGTERM, SIGHUP): their flags, what the commands ask
//! of them, and the handler installed once.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The signals that stop a run: SIGINT (Ctrl-C), SIGTERM (what Slurm and most schedulers send
/// at a time limit or on preemption) and SIGHUP (the terminal or ssh session went away), each
/// with its name and exit status (128 + its number). The first sets its flag: long runs stop
/// after the current step, with a checkpoint, and the same command resumes them;
/// `kernel check --external` stops at once. A second signal of the same kind exits at once.
const STOP_SIGNALS: [(i32, &str, u8); 3] = [
    (signal_hook::consts::SIGTERM, "SIGTERM", 143),
    (signal_hook::consts::SIGHUP, "SIGHUP", 129),
    (signal_hook::consts::SIGINT, "SIGINT", 130),
];

/// One flag per entry of [`STOP_SIGNALS`].
static SIGNALS: OnceLock<[Arc<AtomicBool>; 3]> = OnceLock::new();

fn signal_flags() -> &'static [Arc<AtomicBool>; 3] {
    SIGNALS.get_or_init(|| std::array::from_fn(|_| Arc::new(AtomicBool::new(false))))
}

/// Whether SIGINT, SIGTERM or SIGHUP was received.
pub fn interrupted() -> bool {
    signal_flags().iter().any(|f| f.load(Ordering::SeqCst))
}

/// The signal that stopped a run, by name, and the exit status to end with: 128 + its number
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP; SIGTERM, then SIGHUP, winning when several
/// came). SIGINT's when none came.
pub fn interrupted_by() -> (&'static str, u8) {
    let flags = signal_flags();
    let i = (0..STOP_SIGNALS.len()).find(|&i| flags[i].load(Ordering::SeqCst)).unwrap_or(2);
    (STOP_SIGNALS[i].1, STOP_SIGNALS[i].2)
}

/// The stop check long library work polls ([`phasekv::stop::Stop`]): requested once a first
/// SIGINT, SIGTERM or SIGHUP came. The work then ends with `Error::Interrupted`, which [`run`]
/// turns into the signal's exit status.
pub fn stop() -> phasekv::stop::Stop {
    phasekv::stop::Stop::when(interrupted)
}

/// Exit status of a run stopped by a signal ([`interrupted_by`]).
pub fn interrupted_exit_code() -> ExitCode {
    ExitCode::from(interrupted_by().1)
}

pub(super) fn install_interrupt_handler() {
    for ((sig, _, code), flag) in STOP_SIGNALS.iter().zip(signal_flags()) {
        // Order matters: the conditional shutdown sees the flag a first signal set and exits.
        let _ = signal_hook::flag::register_conditional_shutdown(*sig, *code as i32, Arc::clone(flag));
        let _ = signal_hook::flag::register(*sig, Arc::clone(flag));
    }
}
