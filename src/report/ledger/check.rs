//! Checks on a rendered report (issue 43), for `phasekv report` and the tests: no table cell
//! over [`CELL_LIMIT`] characters, every linked file exists, no two flag paragraphs are
//! identical, and every number of the abstract is one of `ledger.json`'s (each claim's headline
//! mean beside the paper among them). Returns the problems; prints nothing.

use super::banner::Ledger;
use super::screen::{headline, CELL_LIMIT};
use crate::analysis::stats::sample_variance;
use std::fmt;
use std::path::Path;

/// One thing wrong with a rendered report.
#[derive(Clone, Debug, PartialEq)]
pub enum RenderProblem {
    /// A table cell longer than [`CELL_LIMIT`] characters (line number from 1).
    LongCell {
        /// Line, from 1.
        line: usize,
        /// Its characters.
        chars: usize,
    },
    /// A link to a file that does not exist beside the report.
    MissingFile {
        /// Line, from 1.
        line: usize,
        /// The link as written.
        target: String,
    },
    /// Two flag paragraphs with the same text.
    DuplicateFlag {
        /// Line of the first, from 1.
        first: usize,
        /// Line of the repeat.
        again: usize,
    },
    /// A number in the abstract that `ledger.json` does not hold.
    AbstractNumber {
        /// The number as written.
        number: String,
    },
    /// A headline number of `ledger.json` that the abstract leaves out.
    AbstractMissing {
        /// The claim.
        claim: String,
        /// The number as the ledger gives it.
        number: String,
    },
    /// No abstract.
    NoAbstract,
}

impl fmt::Display for RenderProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderProblem::LongCell { line, chars } => {
                write!(f, "line {line}: a table cell of {chars} characters (at most {CELL_LIMIT})")
            }
            RenderProblem::MissingFile { line, target } => {
                write!(f, "line {line}: links {target}, which does not exist")
            }
            RenderProblem::DuplicateFlag { first, again } => {
                write!(f, "line {again}: a flag paragraph identical to line {first}'s")
            }
            RenderProblem::AbstractNumber { number } => {
                write!(f, "the abstract states {number}, which is not a number of ledger.json")
            }
            RenderProblem::AbstractMissing { claim, number } => {
                write!(f, "the abstract leaves out {claim}'s headline {number} from ledger.json")
            }
            RenderProblem::NoAbstract => write!(f, "the report has no \"## Abstract\" section"),
        }
    }
}

/// Every problem of `md`, the `README.md` of the report in `dir` rendered from `ledger`.
pub fn check_rendered(md: &str, dir: &Path, ledger: &Ledger) -> Vec<RenderProblem> {
    let mut out = cells(md);
    out.extend(links(md, dir));
    out.extend(flags(md));
    out.extend(abstract_numbers(md, ledger));
    out
}

/// Table cells over the limit.
pub fn cells(md: &str) -> Vec<RenderProblem> {
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        if !line.starts_with('|') {
            continue;
        }
        for c in line.split('|') {
            let chars = c.trim().chars().count();
            if chars > CELL_LIMIT {
                out.push(RenderProblem::LongCell { line: i + 1, chars });
            }
        }
    }
    out
}

/// The link targets of one line: Markdown `](target)` and HTML `src="target"`, `href="target"`.
fn targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("](", ')'), ("src=\"", '"'), ("href=\"", '"')] {
        let mut rest = line;
        while let Some(i) = rest.find(open) {
            rest = &rest[i + open.len()..];
            if let Some(j) = rest.find(close) {
                out.push(rest[..j].to_string());
                rest = &rest[j..];
            }
        }
    }
    out
}

/// Links to files that do not exist (anchors and web addresses are not files).
pub fn links(md: &str, dir: &Path) -> Vec<RenderProblem> {
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        for t in targets(line) {
            let file = t.split('#').next().unwrap_or("");
            if file.is_empty() || file.contains("://") || file.starts_with("mailto:") {
                continue;
            }
            if !dir.join(file).exists() {
                out.push(RenderProblem::MissingFile { line: i + 1, target: t });
            }
        }
    }
    out
}

/// The text of a flag paragraph (`**Flag N** (claims): text` or a `- **Flag**: text` item).
fn flag_text(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix("- **Flag**: ") {
        return Some(rest);
    }
    let i = line.find("**Flag ")?;
    let rest = &line[i..];
    Some(&rest[rest.find("): ")? + 3..])
}

/// Flag paragraphs that repeat another word for word.
pub fn flags(md: &str) -> Vec<RenderProblem> {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        let Some(t) = flag_text(line) else { continue };
        match seen.iter().find(|(s, _)| *s == t) {
            Some((_, first)) => out.push(RenderProblem::DuplicateFlag { first: *first, again: i + 1 }),
            None => seen.push((t, i + 1)),
        }
    }
    out
}

/// The numbers of `text`: digit runs with an optional decimal part that no letter, digit, `§`
/// or `-`-joined word touches (so `E4`, `w8s8`, `§8.2`, `phases 0-6` are names, not numbers).
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_digit() || (chars[i] == '.' && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())))
        {
            i += 1;
        }
        let before = start.checked_sub(1).map(|j| chars[j]);
        let after = chars.get(i).copied();
        let name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '§' || c == '_');
        let joined = before == Some('-') && start >= 2 && chars[start - 2].is_ascii_digit();
        if !name(before) && !name(after) && !joined && after != Some('-') {
            let n: String = chars[start..i].iter().collect();
            // A leading minus belongs to the number.
            out.push(if before == Some('-') { format!("-{n}") } else { n });
        }
    }
    out
}

/// Every number the ledger holds, as the report prints it: counts, each magnitude's estimate
/// and interval ends, each seed-level magnitude's seed mean and sd, the paper's numbers and the
/// ratios of the two.
fn ledger_numbers(l: &Ledger) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let most = l.claims.len().max(l.banner.len()) + l.claims.iter().map(|c| c.arms.len()).sum::<usize>();
    v.extend((0..=most).map(|n| n.to_string()));
    let f1 = |x: f64| format!("{x:.1}");
    for c in &l.claims {
        for m in &c.measures {
            v.extend([f1(m.value.pp), f1(m.value.lo_pp), f1(m.value.hi_pp)]);
            if let Some(p) = m.paper_pp {
                v.push(f1(p));
            }
            if !m.per_seed_pp.is_empty() {
                let s: Vec<f64> = m.per_seed_pp.iter().map(|s| s.1).collect();
                let mean = s.iter().sum::<f64>() / s.len() as f64;
                v.extend([f1(mean), f1(sample_variance(&s).sqrt())]);
                if let Some(p) = m.paper_pp.filter(|p| *p != 0.0) {
                    v.push(format!("{:.2}", mean / p));
                }
            }
        }
    }
    v
}

/// The abstract's numbers against the ledger's.
pub fn abstract_numbers(md: &str, l: &Ledger) -> Vec<RenderProblem> {
    let Some(start) = md.find("## Abstract") else { return vec![RenderProblem::NoAbstract] };
    let body = &md[start + "## Abstract".len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let known = ledger_numbers(l);
    let found = numbers(body);
    let mut out: Vec<RenderProblem> = found
        .iter()
        .filter(|n| !known.contains(n))
        .map(|n| RenderProblem::AbstractNumber { number: n.clone() })
        .collect();
    for c in &l.claims {
        if let Some(h) = headline(c).filter(|h| h.paper.is_some()) {
            let mean = format!("{:.1}", h.mean);
            if !found.contains(&mean) {
                out.push(RenderProblem::AbstractMissing { claim: c.id.clone(), number: mean });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_skip_names() {
        assert_eq!(
            numbers("E4: w8s8 21.9 ± 3.0 pp [8.0, 40.0] §8.2 phases 0-6, ratio 0.44; -1.5"),
            vec!["21.9", "3.0", "8.0", "40.0", "0.44", "-1.5"]
        );
    }

    #[test]
    fn a_long_cell_is_named_and_a_short_one_is_not() {
        let long = format!("| a | {} |", "x".repeat(CELL_LIMIT + 1));
        assert_eq!(cells(&long), vec![RenderProblem::LongCell { line: 1, chars: CELL_LIMIT + 1 }]);
        assert!(cells(&format!("| a | {} |", "x".repeat(CELL_LIMIT))).is_empty());
    }

    #[test]
    fn identical_flags_are_found() {
        let md = "<a id=\"flag-1\"></a>**Flag 1** (E1): same\n\n<a id=\"flag-2\"></a>**Flag 2** (E2): same\n";
        assert_eq!(flags(md), vec![RenderProblem::DuplicateFlag { first: 1, again: 3 }]);
        assert!(flags("**Flag 1** (E1): one\n**Flag 2** (E2): two\n").is_empty());
    }
}
