//! The committed figures cannot be misread by layout or colour (issue 31): every SVG under
//! `reports/` keeps each text inside its canvas and no legend over a data mark, checked on the
//! SVG the figure code wrote (a negative control shows the checker catches both); the palette
//! and the sequential scales pass the colour-vision checks of `figures::colour`, and the
//! palettes the issue found (red beside green, knockout bins of one red) fail them.

use phasekv::figures::colour::{self, lightness, palette_problems, sequential_problems, PALETTE};
use phasekv::figures::lab::DROP_BINS;
use phasekv::figures::plot::{self, line_chart, Panel, Series, LEGEND_FRAME};
use phasekv::figures::theory::VERDICT_COLOURS;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One SVG element: name, attributes, text content.
struct Elem {
    name: String,
    attrs: BTreeMap<String, String>,
    text: String,
}

impl Elem {
    fn num(&self, key: &str) -> f64 {
        self.attrs.get(key).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
    }
    fn attr(&self, key: &str) -> &str {
        self.attrs.get(key).map(String::as_str).unwrap_or("")
    }
    fn points(&self) -> Vec<(f64, f64)> {
        self.attr("points")
            .split_whitespace()
            .filter_map(|p| p.split_once(','))
            .filter_map(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
            .collect()
    }
}

/// The XML subset plotters writes (elements with quoted attributes, text content).
fn parse_svg(text: &str) -> Vec<Elem> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        if rest.starts_with('/') || rest.starts_with('?') || rest.starts_with('!') {
            continue;
        }
        let end = rest.find('>').expect("unclosed tag");
        let tag = rest[..end].trim_end_matches('/');
        let (name, mut attrs_text) = tag.split_once(char::is_whitespace).unwrap_or((tag, ""));
        let mut attrs = BTreeMap::new();
        while let Some(eq) = attrs_text.find("=\"") {
            let key = attrs_text[..eq].trim().to_string();
            let after = &attrs_text[eq + 2..];
            let close = after.find('"').expect("unclosed attribute value");
            attrs.insert(key, after[..close].to_string());
            attrs_text = &after[close + 1..];
        }
        rest = &rest[end + 1..];
        // Entities unescaped, so a text is measured as drawn (`&apos;` is one character).
        let text = rest[..rest.find('<').unwrap_or(rest.len())]
            .trim()
            .replace("&apos;", "'")
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        out.push(Elem { name: name.to_string(), attrs, text });
    }
    out
}

type Rect = (f64, f64, f64, f64);

/// The box a text occupies (x0, y0, x1, y1), as the PNG draws it (plotters' size is the SVG's
/// `font-size` times 1.24; the width from the embedded font's advances), rotation applied.
fn text_box(e: &Elem) -> Rect {
    let px = e.num("font-size");
    let w = plot::text_width(&e.text, 1.24 * px);
    let (x, y) = (e.num("x"), e.num("y"));
    let (x0, x1) = match e.attr("text-anchor") {
        "middle" => (x - w / 2.0, x + w / 2.0),
        "end" => (x - w, x),
        _ => (x, x + w),
    };
    let (y0, y1) = match e.attr("dy") {
        "0.76em" => (y, y + px),
        "0.5ex" => (y - px / 2.0, y + px / 2.0),
        "-0.5ex" => (y - px, y),
        _ => (y - 0.76 * px, y + 0.24 * px),
    };
    let t = e.attr("transform");
    let Some(args) = t.strip_prefix("rotate(").and_then(|r| r.strip_suffix(')')) else { return (x0, y0, x1, y1) };
    let a: Vec<f64> = args.split(',').filter_map(|v| v.trim().parse().ok()).collect();
    let (th, cx, cy) = (a[0].to_radians(), a[1], a[2]);
    let rot = |(px, py): (f64, f64)| {
        (cx + (px - cx) * th.cos() - (py - cy) * th.sin(), cy + (px - cx) * th.sin() + (py - cy) * th.cos())
    };
    let c = [rot((x0, y0)), rot((x1, y0)), rot((x0, y1)), rot((x1, y1))];
    let xs = c.iter().map(|p| p.0);
    let ys = c.iter().map(|p| p.1);
    (
        xs.clone().fold(f64::INFINITY, f64::min),
        ys.clone().fold(f64::INFINITY, f64::min),
        xs.fold(f64::NEG_INFINITY, f64::max),
        ys.fold(f64::NEG_INFINITY, f64::max),
    )
}

fn inside(p: (f64, f64), r: Rect) -> bool {
    p.0 > r.0 && p.0 < r.2 && p.1 > r.1 && p.1 < r.3
}

/// Whether the segment a-b passes through the open rectangle `r` (Liang-Barsky).
fn crosses(a: (f64, f64), b: (f64, f64), r: Rect) -> bool {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [(-dx, a.0 - r.0), (dx, r.2 - a.0), (-dy, a.1 - r.1), (dy, r.3 - a.1)] {
        if p == 0.0 {
            if q <= 0.0 {
                return false;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    t0 < t1
}

/// The vertices of a data mark, and whether it is one (drawn, not a frame or background).
fn mark_points(e: &Elem) -> Option<Vec<(f64, f64)>> {
    if e.attr("opacity") == "0" {
        return None;
    }
    match e.name.as_str() {
        "polyline" | "polygon" => Some(e.points()),
        "line" => Some(vec![(e.num("x1"), e.num("y1")), (e.num("x2"), e.num("y2"))]),
        "circle" => {
            let (x, y, r) = (e.num("cx"), e.num("cy"), e.num("r"));
            Some(vec![(x - r, y), (x + r, y), (x, y - r), (x, y + r), (x, y)])
        }
        "rect" if e.attr("fill") != "none" => {
            let (x, y, w, h) = (e.num("x"), e.num("y"), e.num("width"), e.num("height"));
            Some(vec![(x, y), (x + w, y), (x + w, y + h), (x, y + h), (x, y)])
        }
        _ => None,
    }
}

/// Every layout problem of one SVG: a text outside the canvas, a data mark inside a legend.
fn layout_problems(svg: &str) -> Vec<String> {
    let els = parse_svg(svg);
    let (w, h) = (els[0].num("width"), els[0].num("height"));
    let mut out = Vec::new();
    const SLACK: f64 = 1.0;
    for e in els.iter().filter(|e| e.name == "text" && !e.text.is_empty()) {
        let b = text_box(e);
        if b.0 < -SLACK || b.1 < -SLACK || b.2 > w + SLACK || b.3 > h + SLACK {
            out.push(format!(
                "text {:?} spans ({:.0}, {:.0})-({:.0}, {:.0}) on a {w}x{h} canvas",
                e.text, b.0, b.1, b.2, b.3
            ));
        }
    }
    let (r, g, b) = LEGEND_FRAME;
    let frame_colour = format!("#{r:02X}{g:02X}{b:02X}");
    let frames: Vec<(usize, Rect)> = els
        .iter()
        .enumerate()
        .filter(|(_, e)| e.name == "rect" && e.attr("stroke") == frame_colour)
        .map(|(i, e)| (i, (e.num("x"), e.num("y"), e.num("x") + e.num("width"), e.num("y") + e.num("height"))))
        .collect();
    for &(fi, f) in &frames {
        for (i, e) in els.iter().enumerate() {
            let Some(pts) = mark_points(e) else { continue };
            let lo = |k: fn(&(f64, f64)) -> f64| pts.iter().map(k).fold(f64::INFINITY, f64::min);
            let hi = |k: fn(&(f64, f64)) -> f64| pts.iter().map(k).fold(f64::NEG_INFINITY, f64::max);
            let contains_frame = e.name == "rect"
                && lo(|p| p.0) <= f.0
                && lo(|p| p.1) <= f.1
                && hi(|p| p.0) >= f.2
                && hi(|p| p.1) >= f.3;
            if contains_frame {
                continue; // a background under the whole legend
            }
            let all_in = pts.iter().all(|&p| p.0 >= f.0 && p.0 <= f.2 && p.1 >= f.1 && p.1 <= f.3);
            if i > fi && all_in {
                continue; // the legend's own entry
            }
            let hit = pts.iter().any(|&p| inside(p, f)) || pts.windows(2).any(|s| crosses(s[0], s[1], f));
            if hit {
                out.push(format!("a <{}> at {:?} lies in the legend box {f:?}", e.name, pts.first()));
            }
        }
    }
    out
}

fn svgs_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        if entry.is_dir() {
            svgs_under(&entry, out);
        } else if entry.extension().is_some_and(|x| x == "svg") {
            out.push(entry);
        }
    }
}

/// Every committed SVG keeps its texts on the canvas and its legends off the data.
#[test]
fn committed_figures_have_no_clipped_text_and_no_covered_data() {
    let mut files = Vec::new();
    svgs_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("reports"), &mut files);
    assert!(files.len() >= 100, "expected the report's figures, found {}", files.len());
    let mut bad = Vec::new();
    for f in &files {
        for p in layout_problems(&std::fs::read_to_string(f).unwrap()) {
            bad.push(format!("{}: {p}", f.display()));
        }
    }
    assert!(bad.is_empty(), "{} problems:\n{}", bad.len(), bad.join("\n"));
}

/// Negative control: a centred title pushed past the left edge, a label past the right edge
/// and a data point and a line under the legend are all found; the legend's own entry is not.
#[test]
fn layout_checker_finds_clipped_text_and_a_covered_legend() {
    let svg = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/svg/clipped-and-covered.svg"),
    )
    .unwrap();
    let p = layout_problems(&svg);
    assert!(p.iter().any(|x| x.contains("a title centred too far left")), "{p:?}");
    assert!(p.iter().any(|x| x.contains("cut at the right edge")), "{p:?}");
    assert!(p.iter().any(|x| x.contains("<circle>")), "{p:?}");
    assert!(p.iter().any(|x| x.contains("<polyline> at Some((10.0")), "{p:?}");
    assert_eq!(p.len(), 4, "the legend's entry and its label are not problems: {p:?}");
}

/// A chart at the sizes the report draws, with a title too long for it and many long legend
/// names, passes: titles shrink or are cut, legend names fit their strip.
#[test]
fn a_crowded_chart_passes_the_layout_checker() {
    let dir = std::env::temp_dir().join(format!("report_figures-{}", std::process::id()));
    let series = (0..14)
        .map(|i| Series::line(format!("a long series name number {i} of many"), vec![(0.0, i as f64), (5.0, 1.0)], i))
        .collect();
    let panel = Panel {
        title: "a title far too long for its panel, which must be shrunk or cut so that none of it leaves the canvas at all".into(),
        x_label: "x".into(),
        y_label: "y".into(),
        series,
        ..Panel::default()
    };
    line_chart(&dir.join("crowded"), &panel).unwrap();
    let p = layout_problems(&std::fs::read_to_string(dir.join("crowded.svg")).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(p.is_empty(), "{p:?}");
}

/// The series palette holds no red/green pair and stays apart for protanopes and deuteranopes;
/// the knockout scale and the Theorem 1 verdict colours step in lightness.
#[test]
fn palettes_are_colour_blind_safe() {
    assert_eq!(palette_problems(&PALETTE), Vec::<String>::new());
    let drops: Vec<_> = DROP_BINS[1..].iter().map(|b| b.2).collect();
    assert_eq!(sequential_problems(&drops), Vec::<String>::new());
    let mut verdicts = VERDICT_COLOURS.to_vec();
    verdicts.sort_by(|a, b| lightness(*a).total_cmp(&lightness(*b)));
    assert_eq!(sequential_problems(&verdicts), Vec::<String>::new());
    // The gain colour is told apart from every drop bin.
    for &d in &drops {
        assert!(colour::min_delta_e(DROP_BINS[0].2, d) >= colour::MIN_DELTA_E, "{d:?}");
    }
    // Issue 43: the clean-accuracy row is told apart from every bin and every pale
    // (not significant) cell; negative control: the old pale grey-blue is not.
    let keep = phasekv::figures::grid::MUTED_KEEP;
    let cells: Vec<_> = DROP_BINS.iter().flat_map(|b| [b.2, colour::muted(b.2, keep)]).collect();
    for &c in &cells {
        assert!(colour::min_delta_e(phasekv::figures::lab::CLEAN_ROW, c) >= colour::MIN_DELTA_E, "{c:?}");
    }
    assert!(cells.iter().any(|&c| colour::min_delta_e((225, 232, 240), c) < colour::MIN_DELTA_E));
}

/// Negative controls: the palettes the issue found fail the checks that the new ones pass.
#[test]
fn colour_checks_reject_the_old_palettes() {
    // The old phase diagram: green beside red.
    let old_t1 = [(120, 200, 120), (230, 120, 100), (240, 200, 90)];
    assert!(palette_problems(&old_t1).iter().any(|p| p.contains("red/green")), "{:?}", palette_problems(&old_t1));
    // The old series palette ended with a green beside Okabe-Ito's vermillion.
    let old = [(213, 94, 0), (0, 158, 115), (31, 120, 60)];
    assert!(palette_problems(&old).iter().any(|p| p.contains("red/green")));
    // Two blues a deuteranope cannot tell apart.
    let close = [(0, 114, 178), (106, 61, 154)];
    assert!(palette_problems(&close).iter().any(|p| p.contains("dE")), "{:?}", palette_problems(&close));
    // The old knockout scale: its first steps are too close in lightness.
    let old_bins =
        [(245, 245, 245), (253, 219, 160), (250, 170, 100), (230, 100, 60), (190, 45, 40), (140, 20, 30), (80, 0, 20)];
    assert!(!sequential_problems(&old_bins).is_empty());
    // A red and a blue of one lightness: apart in hue, not in lightness.
    assert!(!sequential_problems(&[(200, 0, 0), (0, 110, 160)]).is_empty());
}

/// The committed Theorem 1 map (`reports/theory/theory.json`'s `diagram`).
fn committed_diagram() -> phasekv::theory::diagram::DiagramMap {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/theory/theory.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    phasekv::theory::diagram::DiagramMap::parse(json["diagram"].as_str().unwrap()).unwrap()
}

/// The outlined (black, 3 px) cells of a phase-diagram SVG.
fn outlined_cells(svg: &str) -> usize {
    parse_svg(svg).iter().filter(|e| e.name == "rect" && e.attr("stroke") == "#000000").count()
}

/// Issue 43: `t1-phase-diagram.png` outlined a 'k' cell (beta 4, gamma 6), since the outline was
/// a typed rectangle (gamma < 6.5) and the cells the oracle's verdicts. Both now come from one map
/// and one rule (`theory::diagram::in_regime`): no 'k' cell lies in the regime, the figure
/// outlines exactly the regime's cells, and the old rectangle is rejected by
/// `outline_problems` naming that cell (negative control); a 'k' planted inside the regime moves
/// the outline, in the rule and in the drawn figure.
#[test]
fn phase_diagram_outline_and_cells_follow_one_rule() {
    use phasekv::theory::oracle::PointVerdict;
    let map = committed_diagram();
    let regime = map.regime();
    for (i, row) in regime.iter().enumerate() {
        for (j, &inside) in row.iter().enumerate() {
            assert!(!(inside && map.verdicts[i][j] == PointVerdict::NotKkt), "k cell {i},{j} inside the regime");
        }
    }
    assert!(map.outline_problems(&regime).is_empty());
    let num = |s: &String| s.parse::<f64>().unwrap();
    let old: Vec<Vec<bool>> = map
        .betas
        .iter()
        .map(|b| map.gammas.iter().map(|g| (0.5..=4.0).contains(&num(b)) && num(g) < 6.5).collect())
        .collect();
    let p = map.outline_problems(&old);
    // Beta 1 has no 'k' up to gamma 7, so the rule's regime reaches past the old gamma < 6.5 there.
    assert_eq!(
        p,
        vec![
            "cell beta 1 gamma 7 ('+') is not outlined but inside the stated regime".to_string(),
            "cell beta 4 gamma 6 ('k') is outlined but outside the stated regime".to_string()
        ]
    );

    let dir = std::env::temp_dir().join(format!("report_figures-t1-{}", std::process::id()));
    let count = |r: &[Vec<bool>]| r.iter().flatten().filter(|&&x| x).count();
    phasekv::figures::theory::phase_diagram_map(&dir.join("t1"), "t1", &map, None).unwrap();
    assert_eq!(outlined_cells(&std::fs::read_to_string(dir.join("t1.svg")).unwrap()), count(&regime));
    let mut planted = map.clone();
    let row = map.betas.iter().position(|b| b == "2").unwrap();
    planted.verdicts[row][4] = PointVerdict::NotKkt;
    let moved = planted.regime();
    assert!(moved[row][4..].iter().all(|&x| !x) && moved[row][..4].iter().all(|&x| x), "{moved:?}");
    assert!(!planted.outline_problems(&regime).is_empty());
    phasekv::figures::theory::phase_diagram_map(&dir.join("t1p"), "t1", &planted, None).unwrap();
    let drawn = outlined_cells(&std::fs::read_to_string(dir.join("t1p.svg")).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(drawn, count(&moved));
    assert!(drawn < count(&regime));
}

/// Pixels of `colour` in an RGB buffer `w` wide farther than `limit` pixels from every segment
/// of `path` (pixels).
fn stray_pixels(buf: &[u8], w: usize, colour: (u8, u8, u8), path: &[(i32, i32)], limit: f64) -> usize {
    let dist = |p: (f64, f64), a: (i32, i32), b: (i32, i32)| {
        let (a, b) = ((f64::from(a.0), f64::from(a.1)), (f64::from(b.0), f64::from(b.1)));
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = (dx * dx + dy * dy).max(1e-12);
        let t = (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / len2).clamp(0.0, 1.0);
        (p.0 - a.0 - t * dx).hypot(p.1 - a.1 - t * dy)
    };
    buf.chunks(3)
        .enumerate()
        .filter(|(_, c)| (c[0], c[1], c[2]) == colour)
        .filter(|(i, _)| {
            let p = ((i % w) as f64, (i / w) as f64);
            path.windows(2).all(|s| dist(p, s[0], s[1]) > limit)
        })
        .count()
}

/// Issue 43: `gates-dsv4-csa-seed0-trajectory.png` had a stray line its SVG lacked. Plotters'
/// raster backend strokes a 2 px line as one polygon whose inner corner at a join is not
/// limited, so a path that turns back over short segments throws a corner far off and the fill
/// draws a line to it. Drawn as one series (as before) the path below leaves pixels of its colour
/// far from every segment (the negative control); drawn in `stroke_pieces` (as every figure now
/// draws a stroke wider than 1 px) it leaves none, and a path with no sharp join stays one piece.
#[test]
fn a_path_that_turns_back_leaves_no_stray_line_in_the_png() {
    use plotters::prelude::*;
    // Short segments that turn back by about 3 degrees, then by about 170 (in pixels).
    let path = [(5.0, 5.0), (5.12, 5.0), (5.0, 5.01), (5.1, 5.02), (5.6, 5.5)];
    let (w, h) = (400u32, 300u32);
    let draw = |split: bool| -> (Vec<u8>, Vec<(i32, i32)>) {
        let mut buf = vec![255u8; (w * h * 3) as usize];
        let px;
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let mut chart = ChartBuilder::on(&root).build_cartesian_2d(4.0..7.0, 4.0..7.0).unwrap();
            let style = RED.stroke_width(2);
            let pieces =
                if split { plot::stroke_pieces(&path, |p| chart.backend_coord(p)) } else { vec![path.to_vec()] };
            px = path.iter().map(|p| chart.backend_coord(p)).collect();
            for piece in pieces {
                chart.draw_series(LineSeries::new(piece, style)).unwrap();
            }
            root.present().unwrap();
        }
        (buf, px)
    };
    let (old, px) = draw(false);
    let stray_old = stray_pixels(&old, w as usize, (255, 0, 0), &px, 4.0);
    assert!(stray_old > 10, "the control should show the stray line: {stray_old} pixels");
    let (new, _) = draw(true);
    assert_eq!(stray_pixels(&new, w as usize, (255, 0, 0), &px, 4.0), 0);
    let gentle = [(0.0, 0.0), (1.0, 1.0), (2.0, 1.5), (3.0, 3.0)];
    assert_eq!(plot::stroke_pieces(&gentle, |p| ((100.0 * p.0) as i32, (100.0 * p.1) as i32)).len(), 1);
    let back = plot::stroke_pieces(&path, |p| ((1000.0 * p.0) as i32, (1000.0 * p.1) as i32));
    assert!(back.len() >= 2 && back.windows(2).all(|b| b[0].last() == b[1].first()), "{back:?}");
}

/// Issue 43: per-panel y ranges of 10 to 50 pp made a 2 pp dip look like a 20 pp one. The
/// panels of an accuracy figure now share one range: two arms fitted apart (90-100 % and about
/// 55-100 %, the control: they differ) get the union, their stride marks reach it, and no title
/// keeps its own range.
#[test]
fn accuracy_panels_share_one_y_range() {
    use phasekv::analysis::stats::GroupAccuracy;
    use phasekv::figures::lab::{range_label, seeds_panel, share_y_range};
    let groups = |acc: &[usize]| -> Vec<GroupAccuracy> {
        acc.iter().enumerate().map(|(g, &k)| GroupAccuracy::new(g, k, 100)).collect()
    };
    let high = groups(&[99, 98, 99, 97, 99, 98, 99, 97]);
    let low = groups(&[99, 70, 99, 60, 99, 70, 99, 60]);
    let mut panels = vec![
        seeds_panel("a (1 seed)".into(), "x".into(), &[high.as_slice()], None, Some(4), 0),
        seeds_panel("b (1 seed)".into(), "x".into(), &[low.as_slice()], None, Some(4), 1),
    ];
    let own: Vec<(f64, f64)> = panels.iter().map(|p| p.y_range.unwrap()).collect();
    assert_ne!(own[0], own[1], "the control: fitted apart, the ranges differ");
    assert!(panels[0].title.contains(&range_label(own[0])));
    let shared = share_y_range(&mut panels).unwrap();
    assert_eq!(shared, (own[0].0.min(own[1].0), own[0].1.max(own[1].1)));
    for p in &panels {
        assert_eq!(p.y_range, Some(shared));
        assert!(!p.title.contains('['), "{}", p.title);
        let marks: Vec<_> = p.series.iter().filter(|s| s.dashed && s.points.len() == 2).collect();
        assert!(!marks.is_empty());
        assert!(marks.iter().all(|s| s.points[0].1 == shared.0 && s.points[1].1 == shared.1));
    }
    assert_eq!(share_y_range(&mut []), None);
}

/// Issue 43: Theorem 2's convergence figure says in its title what its curves show, and is
/// laid out cleanly. Negative controls: a seed that falls back below the threshold after its
/// convergence time, and one that never converges, change the title's verdict.
#[test]
fn the_t2_convergence_figure_states_what_its_curves_show() {
    use phasekv::figures::theory::{t2_convergence, t2_convergence_verdict};
    use phasekv::theory::flow::ConvergenceCurve;
    let curve = |seed: u64, rise: f64| {
        let times: Vec<f64> = (0..=30).map(|k| 20.0 * k as f64).collect();
        let concentration: Vec<f64> =
            times.iter().map(|&t| if t < rise { 0.3 + 0.6 * t / rise } else { 0.995 }).collect();
        let loss = times.iter().map(|&t| 3.3 + (-t / 100.0).exp()).collect();
        ConvergenceCurve { seed, t_conv: Some(rise), heads_coincide: false, times, concentration, loss }
    };
    let good = vec![curve(0, 400.0), curve(1, 460.0), curve(2, 520.0)];
    assert_eq!(t2_convergence_verdict(&good, 0.99), "all 3 seeds concentrate by t = 520 and stay");
    let mut fell = good.clone();
    fell[1].concentration[28] = 0.5;
    assert!(t2_convergence_verdict(&fell, 0.99).contains("falls back"), "{}", t2_convergence_verdict(&fell, 0.99));
    let mut never = good.clone();
    never[2].t_conv = None;
    never[2].concentration.iter_mut().for_each(|y| *y = 0.4);
    assert_eq!(t2_convergence_verdict(&never, 0.99), "2 of 3 seeds concentrate");
    let dir = crate::common::plans::scratch("t2-convergence-figure");
    let files = t2_convergence(&dir.join("t2-convergence"), &good, 0.99, 3.3).unwrap();
    let svg = files.iter().find(|f| f.extension().is_some_and(|e| e == "svg")).expect("an SVG");
    let text = std::fs::read_to_string(svg).unwrap();
    assert!(text.contains("all 3 seeds concentrate by t = 520 and stay"));
    assert_eq!(layout_problems(&text), Vec::<String>::new());
}
