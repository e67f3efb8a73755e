//! Window geometry: the single source of every formula about windows, offsets, phases,
//! multiplicity, visibility and entry positions (`theory/kernels.md`, "Conventions the spec leaves open").
//!
//! Tokens are 0-indexed, `t = 0..T-1`. A geometry has a window size `W >= 1` and a stride
//! `1 <= S <= W`. Two alignments place window `j`:
//!
//! | alignment | window `j` covers | number of windows `n(T)` |
//! |---|---|---|
//! | [`Alignment::Start`] | `jS ..= jS+W-1` | `floor((T-W)/S)+1` if `T >= W`, else 0 |
//! | [`Alignment::PadLeft`] | `(j+1)S-W ..= (j+1)S-1`, slots before token 0 empty | `floor(T/S)` |
//!
//! The offset of token `t` in window `j` is `i = t - start(j)`. The phase of a token is
//! `t mod S`. An interior token appears at offsets `{phase + mS : m >= 0, phase + mS < W}`, so
//! its multiplicity is `1 + floor((W-1-phase)/S)`: everything position-dependent has period
//! `S`, not `W`.
//!
//! Visibility: entry `j` is visible to a query at `q` iff `end(j) <= q` ([`Visibility::Inclusive`],
//! the released DeepSeek-V4 convention) or `end(j) < q` ([`Visibility::Strict`]).
//!
//! **Grid offset** (issue 30, `theory/kernels.md`, "Staggered grids"). A geometry also has an
//! offset `o` in `0..S` (default 0: the table above). With `o > 0` the whole grid moves right by
//! `o` and **one leading window** covers the start of the sequence: every window moves by the
//! *lead* `o - S` (in `-S+1..=-1`), so window 0 is the grid window that ends at `o - 1 + W - S`
//! and holds token 0 at offset `S - o`; its slots before token 0 are empty, exactly as
//! under `pad_left`. With `o = 0` the lead is 0 and nothing changes. So window `j` covers
//! `start_0(j) + lead ..= end_0(j) + lead`, `n(T)` becomes `n_0(T - lead)` (the count at
//! `T + S - o` of the unshifted grid: the same or one more), the phase of a token is its grid
//! phase `(t - o) mod S`, and every token lies in at least one window, as on the unshifted grid.
//! The offset adds no parameter: a window still has `W` slots.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Where window `j` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Alignment {
    /// Window `j` covers `jS ..= jS+W-1` (the paper's generic kernels).
    Start,
    /// Window `j` covers `(j+1)S-W ..= (j+1)S-1`; slots before token 0 are empty
    /// (DeepSeek-V4 CSA, NSA).
    PadLeft,
}

/// When a compressed entry becomes visible to a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Visible iff `end(j) <= q` (the released DeepSeek-V4 code).
    Inclusive,
    /// Visible iff `end(j) < q`.
    Strict,
}

/// Which position a compressed entry carries (for RoPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryPosition {
    /// The first real token of the window.
    First,
    /// The last token of the window.
    Last,
    /// `(j+1)S - S = jS`: DeepSeek-V4's `4w` (on a shifted grid `jS + lead`, at least 0).
    StrideStart,
}

/// Window size, stride, alignment and grid offset, validated (`1 <= S <= W`, `0 <= o < S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    window: usize,
    stride: usize,
    alignment: Alignment,
    /// The grid offset `o` (absent in JSON when 0, so unstaggered specs and dumps read as before).
    #[serde(default, skip_serializing_if = "is_zero")]
    offset: usize,
}

fn is_zero(o: &usize) -> bool {
    *o == 0
}

/// The first raw token a query at position `q` attends to in its local window of `local` tokens:
/// the window is `local_window_start(q, local) ..= q` (`max(0, q - L + 1) ..= q`). The one place
/// of this rule: the f64 reference attention, the candle attention mask and the fast training
/// engine all call it.
pub fn local_window_start(q: usize, local: usize) -> usize {
    (q + 1).saturating_sub(local)
}

impl Geometry {
    /// A geometry with window `W`, stride `S` and an alignment; `W >= 1` and `1 <= S <= W`.
    pub fn new(window: usize, stride: usize, alignment: Alignment) -> Result<Self> {
        if window == 0 {
            return Err(Error::invalid("window", "must be at least 1, got 0"));
        }
        if stride == 0 {
            return Err(Error::invalid("stride", "must be at least 1, got 0"));
        }
        if stride > window {
            return Err(Error::invalid(
                "stride",
                format!(
                    "must be at most the window ({window}), got {stride}: a stride larger than the window skips tokens"
                ),
            ));
        }
        Ok(Geometry { window, stride, alignment, offset: 0 })
    }

    /// The same geometry on the grid shifted by `offset` (`0 <= offset < S`; module doc).
    pub fn with_offset(self, offset: usize) -> Result<Self> {
        if offset >= self.stride {
            return Err(Error::invalid(
                "offset",
                format!("the grid offset must be in 0..{} (below the stride), got {offset}", self.stride),
            ));
        }
        Ok(Geometry { offset, ..self })
    }

    /// A deserialized geometry re-validated (serde does not call [`Geometry::new`]).
    pub fn revalidate(self) -> Result<Self> {
        Geometry::new(self.window, self.stride, self.alignment)?.with_offset(self.offset)
    }

    /// The grid offset `o`.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// How far every window sits from its place on the unshifted grid: `o - S` for `o > 0`
    /// (one leading, partly empty window), 0 for `o = 0`. The one place of that rule.
    pub fn lead(&self) -> i64 {
        if self.offset == 0 {
            0
        } else {
            self.offset as i64 - self.stride as i64
        }
    }

    /// The window size `W`.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The stride `S`.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The alignment.
    pub fn alignment(&self) -> Alignment {
        self.alignment
    }

    /// Number of complete windows `n(T)` in a sequence of `t_len` tokens.
    pub fn num_windows(&self, t_len: usize) -> usize {
        let (w, s) = (self.window, self.stride);
        // Window j ends at end_0(j) + lead, so it is complete in T tokens iff end_0(j) < T - lead.
        let t_len = t_len + (-self.lead()) as usize;
        match self.alignment {
            Alignment::Start => {
                if t_len >= w {
                    (t_len - w) / s + 1
                } else {
                    0
                }
            }
            Alignment::PadLeft => t_len / s,
        }
    }

    /// Position of offset 0 of window `j` (negative under `PadLeft` when the window reaches
    /// before token 0).
    pub fn start(&self, j: usize) -> i64 {
        let (w, s) = (self.window as i64, self.stride as i64);
        self.lead()
            + match self.alignment {
                Alignment::Start => j as i64 * s,
                Alignment::PadLeft => (j as i64 + 1) * s - w,
            }
    }

    /// Position of the last slot of window `j` (always a real token).
    pub fn end(&self, j: usize) -> usize {
        (self.start(j) + self.window as i64 - 1) as usize
    }

    /// The token at offset `i` of window `j`, or `None` for an empty slot (before token 0).
    pub fn token_at(&self, j: usize, i: usize) -> Option<usize> {
        debug_assert!(i < self.window);
        let t = self.start(j) + i as i64;
        (t >= 0).then_some(t as usize)
    }

    /// The offsets of window `j` that hold real tokens: `first_valid_offset(j)..W`.
    pub fn first_valid_offset(&self, j: usize) -> usize {
        (-self.start(j)).max(0) as usize
    }

    /// Number of real tokens in window `j`.
    pub fn valid_slots(&self, j: usize) -> usize {
        self.window - self.first_valid_offset(j)
    }

    /// The offset of token `t` in window `j`, if `t` lies in it.
    pub fn offset_of(&self, t: usize, j: usize) -> Option<usize> {
        let i = t as i64 - self.start(j);
        (0..self.window as i64).contains(&i).then_some(i as usize)
    }

    /// Every `(window, offset)` pair at which token `t` appears among the windows of a sequence
    /// of `t_len` tokens, in increasing window order.
    pub fn occurrences(&self, t: usize, t_len: usize) -> Vec<(usize, usize)> {
        (0..self.num_windows(t_len)).filter_map(|j| self.offset_of(t, j).map(|i| (j, i))).collect()
    }

    /// The windows whose entries depend on token `t` (for `t_len` tokens).
    pub fn windows_containing(&self, t: usize, t_len: usize) -> Vec<usize> {
        self.occurrences(t, t_len).into_iter().map(|(j, _)| j).collect()
    }

    /// The grid phase `(t - o) mod S` of token `t` (`t mod S` on the unshifted grid).
    pub fn phase(&self, t: usize) -> usize {
        (t + self.stride - self.offset) % self.stride
    }

    /// The offsets at which an interior token of the given phase appears:
    /// `{phase + mS : m >= 0, phase + mS < W}` (empty when the phase is not `< S`).
    pub fn interior_offsets(&self, phase: usize) -> Vec<usize> {
        if phase >= self.stride {
            return Vec::new();
        }
        (phase..self.window).step_by(self.stride).collect()
    }

    /// Multiplicity of an interior token of the given phase: `1 + floor((W-1-phase)/S)`.
    pub fn multiplicity(&self, phase: usize) -> usize {
        if phase >= self.stride {
            return 0;
        }
        1 + (self.window - 1 - phase) / self.stride
    }

    /// Whether token `t` is interior in a sequence of `t_len` tokens: it appears at exactly the
    /// offsets its phase predicts, and only in windows without empty slots (so no boundary
    /// effect touches it).
    pub fn is_interior(&self, t: usize, t_len: usize) -> bool {
        let occ = self.occurrences(t, t_len);
        if occ.iter().any(|&(j, _)| self.valid_slots(j) < self.window) {
            return false;
        }
        let mut got: Vec<usize> = occ.into_iter().map(|(_, i)| i).collect();
        got.sort_unstable();
        got == self.interior_offsets(self.phase(t))
    }

    /// The last slot of the last window that holds token `t`, on a sequence long enough to
    /// hold that window: after this position no entry that depends on `t` is still open. Window
    /// `j` starts at `start(0) + jS` under both alignments, so the last one holding `t` is
    /// `j = floor((t - start(0)) / S)` and this is `t + W - 1 - ((t - start(0)) mod S)`: at
    /// most `t + W - 1`, reached by the tokens at offset 0 of a window (the depth floor of
    /// `theory/phase-lab.md` §9.2 rests on it).
    pub fn last_end_containing(&self, t: usize) -> usize {
        let first = self.start(0);
        let j = (t as i64 - first).div_euclid(self.stride as i64);
        (first + j * self.stride as i64 + self.window as i64 - 1) as usize
    }

    /// Whether entry `j` may be used by a query at position `q`.
    pub fn is_visible(&self, j: usize, q: usize, visibility: Visibility) -> bool {
        match visibility {
            Visibility::Inclusive => self.end(j) <= q,
            Visibility::Strict => self.end(j) < q,
        }
    }

    /// Number of entries visible to a query at position `q` (entries become visible in order).
    pub fn num_visible(&self, q: usize, visibility: Visibility) -> usize {
        let horizon = match visibility {
            Visibility::Inclusive => q + 1,
            Visibility::Strict => q,
        };
        self.num_windows(horizon)
    }

    /// The position carried by entry `j` (for RoPE).
    pub fn entry_position(&self, j: usize, which: EntryPosition) -> usize {
        match which {
            EntryPosition::First => self.start(j).max(0) as usize,
            EntryPosition::Last => self.end(j),
            EntryPosition::StrideStart => (j as i64 * self.stride as i64 + self.lead()).max(0) as usize,
        }
    }

    /// The token index for every slot of every window of a `t_len`-token sequence, row-major
    /// `[n(T), W]`, with `None` for empty slots. The one place that lays windows out in memory.
    pub fn slot_tokens(&self, t_len: usize) -> Vec<Option<usize>> {
        let n = self.num_windows(t_len);
        let mut out = Vec::with_capacity(n * self.window);
        for j in 0..n {
            for i in 0..self.window {
                out.push(self.token_at(j, i));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_impossible_geometry() {
        assert!(Geometry::new(0, 1, Alignment::Start).unwrap_err().to_string().contains("window"));
        assert!(Geometry::new(4, 0, Alignment::Start).unwrap_err().to_string().contains("stride"));
        let e = Geometry::new(4, 8, Alignment::Start).unwrap_err().to_string();
        assert!(e.contains("stride") && e.contains("at most"), "{e}");
    }

    #[test]
    fn csa_index_map_matches_reference_table() {
        // DeepSeek-V4's CSA (theory/kernels.md, "Conventions the spec leaves open"): entry w covers 4w-4 ..= 4w+3, RoPE at 4w,
        // first visible to the query at 4w+3.
        let g = Geometry::new(8, 4, Alignment::PadLeft).unwrap();
        assert_eq!(g.num_windows(3), 0);
        assert_eq!(g.num_windows(4), 1);
        assert_eq!(g.num_windows(11), 2);
        assert_eq!(g.start(0), -4);
        assert_eq!(g.first_valid_offset(0), 4);
        assert_eq!(g.valid_slots(0), 4);
        assert_eq!((g.start(2), g.end(2)), (4, 11));
        assert_eq!(g.entry_position(2, EntryPosition::StrideStart), 8);
        assert!(g.is_visible(2, 11, Visibility::Inclusive));
        assert!(!g.is_visible(2, 10, Visibility::Inclusive));
        assert!(!g.is_visible(2, 11, Visibility::Strict));
        assert_eq!(g.windows_containing(5, 100), vec![1, 2]);
        assert_eq!(g.num_visible(11, Visibility::Inclusive), 3);
    }

    #[test]
    fn multiplicity_and_offsets_w8s6() {
        let g = Geometry::new(8, 6, Alignment::Start).unwrap();
        assert_eq!(g.interior_offsets(1), vec![1, 7]);
        assert_eq!(g.interior_offsets(3), vec![3]);
        assert_eq!((0..6).map(|p| g.multiplicity(p)).collect::<Vec<_>>(), vec![2, 2, 1, 1, 1, 1]);
        assert_eq!(g.num_windows(7), 0);
        assert_eq!(g.num_windows(8), 1);
        assert_eq!(g.num_windows(13), 1);
        assert_eq!(g.num_windows(14), 2);
        assert!(g.is_interior(13, 40));
        assert!(!g.is_interior(1, 40)); // token 1 is only at offset 1 of window 0
        let csa = Geometry::new(8, 4, Alignment::PadLeft).unwrap();
        assert!(!csa.is_interior(0, 40)); // right offsets {0, 4}, but window 0 is half empty
        assert!(csa.is_interior(4, 40));
    }

    #[test]
    fn grid_offset_shifts_every_window_and_adds_one_leading_window() {
        let g = Geometry::new(8, 8, Alignment::Start).unwrap().with_offset(4).unwrap();
        assert_eq!((g.offset(), g.lead()), (4, -4));
        // Window 0 is the leading partial window: tokens 0..=3 at offsets 4..=7.
        assert_eq!((g.start(0), g.end(0), g.first_valid_offset(0)), (-4, 3, 4));
        assert_eq!((g.start(1), g.end(1)), (4, 11));
        assert_eq!((g.num_windows(3), g.num_windows(4), g.num_windows(12), g.num_windows(16)), (0, 1, 2, 2));
        assert_eq!(g.phase(4), 0);
        assert_eq!(g.phase(3), 7);
        assert!(g.is_interior(9, 40) && !g.is_interior(2, 40));
        assert_eq!(g.entry_position(0, EntryPosition::First), 0);
        assert_eq!(g.entry_position(1, EntryPosition::First), 4);
        assert_eq!(g.entry_position(1, EntryPosition::StrideStart), 4);
        assert_eq!(g.num_visible(11, Visibility::Inclusive), 2);
        // The unshifted grid is offset 0, and its windows are the shifted ones moved back.
        let g0 = Geometry::new(8, 8, Alignment::Start).unwrap();
        assert_eq!(g0.with_offset(0).unwrap(), g0);
        for o in 1..8 {
            let g = g0.with_offset(o).unwrap();
            for t in 0..40 {
                assert_eq!(g.num_windows(t), g0.num_windows(t + 8 - o), "o={o} t={t}");
                assert!(!g.windows_containing(t, 64).is_empty(), "o={o}: token {t} in no window");
            }
        }
        let csa = Geometry::new(8, 4, Alignment::PadLeft).unwrap().with_offset(1).unwrap();
        assert_eq!((csa.start(0), csa.end(0), csa.num_windows(1)), (-7, 0, 1));
        let e = g0.with_offset(8).unwrap_err().to_string();
        assert!(e.contains("offset") && e.contains("0..8") && e.contains('8'), "{e}");
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains("\"offset\":4"), "{json}");
        assert!(!serde_json::to_string(&g0).unwrap().contains("offset"));
    }
}
