//! Staggered grids (issue 30, `theory/kernels.md`, "Staggered grids"): which grid offset each KV
//! head of each layer compresses on.
//!
//! A spec's [`Stagger`] rule gives head `h` of layer `l` (of `n_kv_head` heads and `n_layer`
//! layers) the offset
//!
//! | rule | offset `o(l, h)` |
//! |---|---|
//! | [`Stagger::None`] | `o` (the geometry's own offset; 0 for every preset) |
//! | [`Stagger::Heads`] | `(o + floor(h S / n_kv_head)) mod S` |
//! | [`Stagger::Layers`] | `(o + floor(l S / n_layer)) mod S` |
//!
//! and [`KernelSpec::for_head`] is that head's kernel: the same spec on the shifted grid, with
//! no rule left (what a dump of one head carries). A kernel is one head's compressor; the rule
//! only says how a model lays its heads out, so it adds no parameter and changes no window size.

use super::kernel_spec::KernelSpec;
use super::knobs::Stagger;
use crate::{Error, Result};

impl KernelSpec {
    /// The grid offset of KV head `head` in layer `layer` (module table). Checks the indices.
    pub fn head_offset(&self, layer: usize, n_layer: usize, head: usize, n_kv_head: usize) -> Result<usize> {
        if layer >= n_layer {
            return Err(Error::invalid("layer", format!("must be below n_layer ({n_layer}), got {layer}")));
        }
        if head >= n_kv_head {
            return Err(Error::invalid("head", format!("must be below n_kv_head ({n_kv_head}), got {head}")));
        }
        let k = self.layer(layer);
        let g = &k.geometry;
        let s = g.stride();
        let shift = match k.stagger {
            Stagger::None => 0,
            Stagger::Heads => head * s / n_kv_head,
            Stagger::Layers => layer * s / n_layer,
        };
        Ok((g.offset() + shift) % s)
    }

    /// The kernel of KV head `head` in layer `layer`: the layer's kernel ([`KernelSpec::layer`]:
    /// its layout entry, or this spec) on that head's grid, with no stagger rule or layout left.
    pub fn for_head(&self, layer: usize, n_layer: usize, head: usize, n_kv_head: usize) -> Result<KernelSpec> {
        let offset = self.head_offset(layer, n_layer, head, n_kv_head)?;
        let k = self.layer(layer);
        Ok(KernelSpec { geometry: k.geometry.with_offset(offset)?, stagger: Stagger::None, layout: None, ..k.clone() })
    }

    /// Every head's offset, `[n_layer][n_kv_head]`.
    pub fn grid_offsets(&self, n_layer: usize, n_kv_head: usize) -> Result<Vec<Vec<usize>>> {
        (0..n_layer).map(|l| (0..n_kv_head).map(|h| self.head_offset(l, n_layer, h, n_kv_head)).collect()).collect()
    }

    /// Whether heads of one model may sit on different grids (a rule other than `none`).
    pub fn is_staggered(&self) -> bool {
        !self.stagger.is_none()
    }

    /// Refuses a model shape on which the rule staggers nothing (a staggered arm that silently
    /// equals its unstaggered twin): `heads` needs `n_kv_head >= 2`, `layers` needs `n_layer >= 2`.
    pub fn check_stagger_shape(&self, n_layer: usize, n_kv_head: usize) -> Result<()> {
        match self.stagger {
            Stagger::Heads if n_kv_head < 2 => Err(Error::invalid(
                "model.n_kv_head",
                format!("kernel '{}' staggers the KV heads, so it needs at least 2, got {n_kv_head}", self.name),
            )),
            Stagger::Layers if n_layer < 2 => Err(Error::invalid(
                "model.n_layer",
                format!("kernel '{}' staggers the layers, so it needs at least 2, got {n_layer}", self.name),
            )),
            _ => Ok(()),
        }
    }

    /// The distinct grid offsets this spec puts heads on for a model shape, in increasing order
    /// (what the invariant harness runs: each head's own grid).
    pub fn distinct_offsets(&self, n_layer: usize, n_kv_head: usize) -> Result<Vec<usize>> {
        let mut all: Vec<usize> = self.grid_offsets(n_layer, n_kv_head)?.into_iter().flatten().collect();
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }
}

impl KernelSpec {
    /// The kernels of every distinct grid this spec's heads sit on for a model shape, in
    /// increasing offset (an unstaggered spec: itself, unchanged; a layout: each distinct layer
    /// kernel, in order of first use, none staggered). What `kernel check` and the invariant
    /// tests run: each head on its own grid, each layer with its own kernel.
    pub fn head_kernels(&self, n_layer: usize, n_kv_head: usize) -> Result<Vec<KernelSpec>> {
        if self.is_layout() {
            return Ok(self.distinct_layers(n_layer).into_iter().map(|(_, k)| k.clone()).collect());
        }
        if !self.is_staggered() {
            return Ok(vec![self.clone()]);
        }
        self.distinct_offsets(n_layer, n_kv_head)?
            .into_iter()
            .map(|o| Ok(KernelSpec { geometry: self.geometry.with_offset(o)?, stagger: Stagger::None, ..self.clone() }))
            .collect()
    }

    /// A label naming the grid: the name, with `@o{offset}` when the offset is not 0.
    pub fn grid_label(&self) -> String {
        match self.geometry.offset() {
            0 => self.name.clone(),
            o => format!("{}@o{o}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_spread_offsets_as_the_table_says() {
        let heads = KernelSpec::preset("w8s8-stagger-heads").unwrap();
        assert_eq!(heads.grid_offsets(2, 2).unwrap(), vec![vec![0, 4], vec![0, 4]]);
        assert_eq!(heads.grid_offsets(1, 4).unwrap(), vec![vec![0, 2, 4, 6]]);
        let layers = KernelSpec::preset("w8s8-stagger-layers").unwrap();
        assert_eq!(layers.grid_offsets(2, 2).unwrap(), vec![vec![0, 0], vec![4, 4]]);
        assert_eq!(layers.grid_offsets(3, 1).unwrap(), vec![vec![0], vec![2], vec![5]]);
        let kv1 = KernelSpec::preset("w8s4-stagger-layers").unwrap();
        assert_eq!(kv1.grid_offsets(2, 1).unwrap(), vec![vec![0], vec![2]]);
        let h1 = heads.for_head(0, 2, 1, 2).unwrap();
        assert_eq!((h1.geometry.offset(), h1.stagger), (4, Stagger::None));
        assert_eq!(KernelSpec::preset("w8s8").unwrap().distinct_offsets(2, 2).unwrap(), vec![0]);
        let e = heads.check_stagger_shape(2, 1).unwrap_err().to_string();
        assert!(e.contains("model.n_kv_head") && e.contains("got 1"), "{e}");
        assert!(layers.check_stagger_shape(1, 2).unwrap_err().to_string().contains("model.n_layer"));
        assert!(heads.head_offset(0, 2, 2, 2).unwrap_err().to_string().contains("head"));
    }
}
