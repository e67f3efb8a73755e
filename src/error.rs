//! The crate's one error type. Every variant names what was wrong (which field, which shape,
//! which file) so that the CLI can print it as a single clear line.

use std::path::PathBuf;

/// Errors returned by the phasekv library. The binary wraps them in `anyhow` and prints one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value outside its allowed range: `field` names it, `reason` says what is
    /// allowed and what was given.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The offending field, as the user would write it (`stride`, `--preset`, `beta` ...).
        field: String,
        /// What is allowed, and what was given.
        reason: String,
    },
    /// A tensor or array of the wrong shape.
    #[error("shape mismatch in {what}: expected {expected}, got {got}")]
    Shape {
        /// Which tensor.
        what: String,
        /// The expected shape, in words or as `[a, b]`.
        expected: String,
        /// The shape that was given.
        got: String,
    },
    /// A file that exists but cannot be used (truncated, corrupt, contradictory metadata).
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An operating-system I/O failure on a path.
    #[error("{}: {error}", path.display())]
    Io {
        /// The path being read or written.
        path: PathBuf,
        /// The underlying error: in the message and deliberately not a `source` (an error
        /// chain printed with `{:#}` would repeat the OS text).
        error: std::io::Error,
    },
    /// A directory that another process is writing (advisory lock held).
    #[error("{}: run directory in use by {holder}; wait for it to finish or choose another directory", path.display())]
    Busy {
        /// The directory.
        path: PathBuf,
        /// Who holds it (`pid N`, or `another process`).
        holder: String,
    },
    /// Training diverged: stopped without writing `metrics.json` (exit status 1).
    #[error("training diverged at step {step}: {reason}")]
    Diverged {
        /// Steps completed when the divergence was seen.
        step: usize,
        /// What was seen, with the bound it broke.
        reason: String,
    },
    /// A run directory that already holds a finished run (never overwritten).
    #[error("{} already holds a finished run; choose another output directory", path.display())]
    FinishedRun {
        /// The run directory.
        path: PathBuf,
    },
    /// Work stopped on request ([`crate::stop::Stop`], a signal the CLI caught) before it wrote
    /// anything; the CLI exits with the signal's status.
    #[error("stopped during {what}; nothing was written")]
    Interrupted {
        /// What was running.
        what: String,
    },
    /// A numerical procedure that did not produce a usable result (NaN, divergence).
    #[error("numerical failure in {what}: {reason}")]
    Numerical {
        /// Which computation.
        what: String,
        /// What happened.
        reason: String,
    },
    /// An error from the candle tensor backend.
    #[error("tensor backend: {0}")]
    Candle(candle_core::Error),
}

/// Not `#[from]`: that would also make the candle error a `source`, printed twice in a chain.
impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Candle(e)
    }
}

impl Error {
    /// An interruption inside a stage of `command` names the command first, then the stage
    /// ("audit analyze (the permutation test)"), so the user's one line says what stopped
    /// whichever stage the signal reached; every other error passes through unchanged.
    pub fn during(self, command: &str) -> Self {
        match self {
            Error::Interrupted { what } if !what.starts_with(command) => {
                Error::Interrupted { what: format!("{command} ({what})") }
            }
            e => e,
        }
    }

    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid { field: field.into(), reason: reason.into() }
    }

    /// Shorthand for [`Error::Shape`].
    pub fn shape(what: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        Error::Shape { what: what.into(), expected: expected.into(), got: got.into() }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::Io { path: path.into(), error }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn an_interrupted_stage_names_its_command_once_and_other_errors_pass_through() {
        let stage = Error::Interrupted { what: "the permutation test".into() }.during("audit analyze");
        assert_eq!(stage.to_string(), "stopped during audit analyze (the permutation test); nothing was written");
        // Already named by the command (its own check, or a nested call): left as it is.
        let own = Error::Interrupted { what: "audit analyze (reading results)".into() }.during("audit analyze");
        assert_eq!(own.to_string(), "stopped during audit analyze (reading results); nothing was written");
        let other = Error::invalid("--modulus", "must be 2..=64").during("audit analyze");
        assert!(matches!(other, Error::Invalid { .. }), "{other}");
    }
}
