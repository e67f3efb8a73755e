//! The limits of a lab request, checked before any work: prompts per group and forward-pass work.

use crate::{Error, Result};

/// `--samples` prompts per group: within `1..=MAX_SAMPLES_PER_GROUP`, and the prompts of
/// every group (`groups` of them, `seq_len` tokens each) within [`crate::limits::MAX_HELD_TOKENS`].
pub fn check_samples(field: &str, per_group: usize, groups: usize, seq_len: usize) -> Result<()> {
    use crate::limits::*;
    check_range(field, per_group, 1, MAX_SAMPLES_PER_GROUP)?;
    check_product(
        &format!("{field} x groups x sequence length"),
        product(&[per_group, groups, seq_len]),
        MAX_HELD_TOKENS,
    )?;
    Ok(())
}

/// Work of one forward pass of the decoder over one sequence of `config`, in units of one
/// multiply-add, estimated: every token meets every parameter (`RunConfig::parameter_estimate`)
/// and, per layer and query head, the `T` keys of its sequence (`T d_h` scores and as many
/// value terms). `None` on overflow.
pub fn forward_work(config: &crate::model::RunConfig) -> Option<u64> {
    let m = &config.model;
    let t = config.task.checked_seq_len()?;
    let attention = crate::limits::product(&[m.n_layer, m.n_head, 2 * m.d_head, t])?;
    config.parameter_estimate()?.checked_add(attention)?.checked_mul(t as u64)
}

/// `sequences` forward passes of `config`'s decoder ([`forward_work`]) within
/// [`crate::limits::MAX_LAB_WORK`], checked before any work; above it, an error naming
/// `field`, the estimate, the limit and how many `unit`s fit (`per_unit` sequences each).
pub fn check_lab_work(
    field: &str,
    config: &crate::model::RunConfig,
    sequences: Option<u64>,
    per_unit: u64,
    unit: &str,
) -> Result<()> {
    let max = crate::limits::MAX_LAB_WORK;
    let one = forward_work(config);
    let work = sequences.zip(one).and_then(|(n, w)| n.checked_mul(w));
    if work.is_some_and(|w| w <= max) {
        return Ok(());
    }
    let fit = one.and_then(|w| w.checked_mul(per_unit.max(1))).map_or(0, |u| max / u.max(1));
    Err(Error::invalid(
        field,
        format!(
            "{} units of work (forward passes x multiply-adds each) are above the limit of {max} (MAX_LAB_WORK); {}",
            work.map_or("more than 2^64".to_string(), |w| w.to_string()),
            match fit {
                0 => "not even one fits on this model".to_string(),
                k => format!("at most {k} {unit} fit"),
            }
        ),
    ))
}
