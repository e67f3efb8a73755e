//! Colours, chosen to be read by colour-blind readers and checked in code ([`palette_problems`],
//! [`sequential_problems`]): the series palette holds no red/green pair and every two of its
//! colours stay apart under simulated protanopia and deuteranopia; sequential scales (knockout
//! drops, Theorem 1's verdicts) step in lightness, so they read even in greyscale.
//!
//! Lightness and colour distance are CIELAB (D65) `L*` and `ΔE76`; colour-vision deficiency is
//! simulated with Machado, Oliveira and Fernandes (2009) at severity 1 on linear RGB.

use plotters::style::RGBColor;

/// An sRGB colour.
pub type Rgb = (u8, u8, u8);

/// The series colours: Okabe and Ito's blue, vermillion, sky blue, reddish purple and orange,
/// then brown, navy, wine and black. No green: a green beside the vermillion is the pair a
/// red-green colour-blind reader confuses.
pub const PALETTE: [Rgb; 9] = [
    (0, 114, 178),
    (213, 94, 0),
    (86, 180, 233),
    (204, 121, 167),
    (230, 159, 0),
    (140, 86, 75),
    (0, 45, 98),
    (102, 0, 51),
    (0, 0, 0),
];

/// Palette index of black (diagonals, `1/W` lines).
pub const BLACK: usize = 8;

/// Index of the reference grey: dashed reference lines only (stride marks, uniform levels),
/// never a data series, so it is outside [`PALETTE`]'s distinctness check.
pub const GREY: usize = PALETTE.len();

/// The grey of [`GREY`].
pub const GREY_RGB: Rgb = (120, 120, 120);

/// Smallest colour distance (`ΔE76`) between two series colours, under normal vision and both
/// simulated deficiencies.
pub const MIN_DELTA_E: f64 = 15.0;

/// Smallest lightness step (`L*`) between adjacent classes of a sequential scale.
pub const MIN_LIGHTNESS_STEP: f64 = 10.0;

/// The `i`-th series colour (wrapping over [`PALETTE`]); [`GREY`] is the reference grey.
pub fn palette(i: usize) -> RGBColor {
    let (r, g, b) = if i == GREY { GREY_RGB } else { PALETTE[i % PALETTE.len()] };
    RGBColor(r, g, b)
}

fn linear(c: u8) -> f64 {
    let c = f64::from(c) / 255.0;
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn lab_of_linear(rgb: [f64; 3]) -> [f64; 3] {
    let [r, g, b] = rgb;
    let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
    let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
    let f = |t: f64| if t > 216.0 / 24389.0 { t.cbrt() } else { (24389.0 / 27.0 * t + 16.0) / 116.0 };
    let (fx, fy, fz) = (f(x), f(y), f(z));
    [116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)]
}

/// CIELAB `(L*, a*, b*)` of an sRGB colour.
pub fn lab(c: Rgb) -> [f64; 3] {
    lab_of_linear([linear(c.0), linear(c.1), linear(c.2)])
}

/// `L*` (0 black, 100 white).
pub fn lightness(c: Rgb) -> f64 {
    lab(c)[0]
}

/// A simulated colour-vision deficiency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vision {
    /// Normal colour vision.
    Normal,
    /// Protanopia (no long-wavelength cones).
    Protan,
    /// Deuteranopia (no medium-wavelength cones).
    Deutan,
}

/// CIELAB of `c` as a reader with `v` sees it.
pub fn seen(c: Rgb, v: Vision) -> [f64; 3] {
    let m: [[f64; 3]; 3] = match v {
        Vision::Normal => return lab(c),
        Vision::Protan => {
            [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
        }
        Vision::Deutan => {
            [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
        }
    };
    let l = [linear(c.0), linear(c.1), linear(c.2)];
    let o = m.map(|row| (row[0] * l[0] + row[1] * l[1] + row[2] * l[2]).clamp(0.0, 1.0));
    lab_of_linear(o)
}

/// The smallest `ΔE76` between `a` and `b` over normal vision, protanopia and deuteranopia.
pub fn min_delta_e(a: Rgb, b: Rgb) -> f64 {
    [Vision::Normal, Vision::Protan, Vision::Deutan]
        .into_iter()
        .map(|v| {
            let (x, y) = (seen(a, v), seen(b, v));
            ((x[0] - y[0]).powi(2) + (x[1] - y[1]).powi(2) + (x[2] - y[2]).powi(2)).sqrt()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Hue angle (degrees, `0..360`) and chroma in CIELAB.
fn hue(c: Rgb) -> (f64, f64) {
    let [_, a, b] = lab(c);
    (b.atan2(a).to_degrees().rem_euclid(360.0), a.hypot(b))
}

/// A saturated red to orange (hue below 60° or from 330°, chroma at least 30).
pub fn is_red(c: Rgb) -> bool {
    let (h, ch) = hue(c);
    ch >= 30.0 && !(60.0..330.0).contains(&h)
}

/// A saturated green (hue 110-200°, chroma at least 30).
pub fn is_green(c: Rgb) -> bool {
    let (h, ch) = hue(c);
    ch >= 30.0 && (110.0..200.0).contains(&h)
}

/// What makes `colours` unfit as series colours: a red/green pair, or two colours closer than
/// [`MIN_DELTA_E`] under normal vision or a simulated deficiency. Empty: fit.
pub fn palette_problems(colours: &[Rgb]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, &a) in colours.iter().enumerate() {
        for &b in &colours[i + 1..] {
            if (is_red(a) && is_green(b)) || (is_green(a) && is_red(b)) {
                out.push(format!("{a:?} and {b:?} are a red/green pair"));
            }
            let d = min_delta_e(a, b);
            if d < MIN_DELTA_E {
                out.push(format!("{a:?} and {b:?} differ by dE {d:.1} (< {MIN_DELTA_E}) for some reader"));
            }
        }
    }
    out
}

/// What makes `scale` unfit as a sequential scale (classes in order): adjacent classes whose
/// lightness differs by less than [`MIN_LIGHTNESS_STEP`], or a red/green pair. Empty: fit.
pub fn sequential_problems(scale: &[Rgb]) -> Vec<String> {
    let mut out = Vec::new();
    for w in scale.windows(2) {
        let d = (lightness(w[0]) - lightness(w[1])).abs();
        if d < MIN_LIGHTNESS_STEP {
            out.push(format!("{:?} and {:?} differ by L* {d:.1} (< {MIN_LIGHTNESS_STEP})", w[0], w[1]));
        }
    }
    for (i, &a) in scale.iter().enumerate() {
        for &b in &scale[i + 1..] {
            if (is_red(a) && is_green(b)) || (is_green(a) && is_red(b)) {
                out.push(format!("{a:?} and {b:?} are a red/green pair"));
            }
        }
    }
    out
}

/// `c` blended toward white, keeping `keep` of its colour (muted cells).
pub fn muted(c: Rgb, keep: f64) -> Rgb {
    let m = |x: u8| (255.0 - keep * (255.0 - f64::from(x))).round() as u8;
    (m(c.0), m(c.1), m(c.2))
}
