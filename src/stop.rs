//! A stop request from outside the library: the CLI's signal handler (SIGINT, SIGTERM, SIGHUP)
//! sets a flag, and long work polls it through a [`Stop`] passed down, so the library never
//! imports the CLI and never installs a handler itself. Work that sees the request ends with
//! [`Error::Interrupted`] before writing anything (results are written whole, at the end, by an
//! atomic rename), so a stopped command leaves no partial output; the CLI exits with the
//! signal's status (130, 143, 129).
//!
//! Poll [`Stop::check`] between units of work that take well under a second (a batch of
//! prompts, a sequence of a dump, a displacement of the phase profile), so the first signal
//! ends the command within a second or two.

use crate::{Error, Result};
use std::sync::Arc;

/// Whether the caller asked the work to stop; cheap to clone and to poll, shareable across
/// threads. [`Stop::never`] (the default) never asks.
#[derive(Clone, Default)]
pub struct Stop(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl Stop {
    /// A stop that is never requested (library callers and tests).
    pub fn never() -> Self {
        Stop(None)
    }

    /// A stop requested whenever `requested()` returns true (the CLI passes its signal flags).
    pub fn when(requested: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Stop(Some(Arc::new(requested)))
    }

    /// Whether a stop is requested now.
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f())
    }

    /// `Err(Error::Interrupted)` naming `what` was running when a stop is requested.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.requested() {
            return Err(Error::Interrupted { what: what.to_string() });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Stop(polled)" } else { "Stop(never)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_stop_is_seen_once_requested_and_never_before() {
        assert!(Stop::never().check("x").is_ok());
        let flag = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&flag);
        let stop = Stop::when(move || f.load(Ordering::SeqCst));
        assert!(stop.check("eval").is_ok());
        flag.store(true, Ordering::SeqCst);
        let e = stop.clone().check("eval").unwrap_err();
        assert!(matches!(e, Error::Interrupted { .. }) && e.to_string().contains("eval"), "{e}");
    }
}
