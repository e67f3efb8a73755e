//! The model and head widths of a kernel instance.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Model and head widths for a kernel instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelDims {
    /// Width `d` of the hidden states fed to the kernel.
    pub d_model: usize,
    /// Width `d_h` of each compressed key/value.
    pub d_head: usize,
}

impl KernelDims {
    /// Validated dims (both at least 1).
    pub fn new(d_model: usize, d_head: usize) -> Result<Self> {
        if d_model == 0 {
            return Err(Error::invalid("d_model", "must be at least 1, got 0"));
        }
        if d_head == 0 {
            return Err(Error::invalid("d_head", "must be at least 1, got 0"));
        }
        Ok(KernelDims { d_model, d_head })
    }
}
