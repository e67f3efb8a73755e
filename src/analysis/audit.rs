//! The phase audit of a model that lives elsewhere (`theory/phase-lab.md` §1, §7): the protocol's
//! prompts exported as JSONL, and per-sample results read back.
//!
//! **Export**, one JSON object per line: `id`, `protocol`, `group`, `target_pos` (source-key
//! position), `query_pos` and `answer_pos` of the scored (last) query, `record_positions`,
//! `tokens` (ids of this crate's task vocabulary, the scored answer excluded), `answer` (ids),
//! and `text` / `answer_text`: the same prompt rendered with a user-given filler word and record
//! and query templates (`{key}`, `{value}`), pieces joined by single spaces. Positions count
//! tokens of `tokens`; an external tokenizer has its own positions, so a text audit's phases are
//! those of the filler and templates chosen (use a filler of one token in that tokenizer).
//!
//! **Results**, one JSON object per line (blank lines skipped, other fields ignored): `group`
//! (an integer in `0..M`, required), and `correct` (boolean) or `prob` (the answer's
//! probability, in `[0, 1]`; counted correct when `>= 0.5` if `correct` is absent); `id`
//! (non-negative integer) is optional and defaults to the line's index; `position` (the
//! target's source-key position, `group = position mod M`) and `depth` (query position minus
//! it), both optional, give the depth-controlled phase test its records without an export.
//! Every problem is reported with its line number. The suite's own outcome files
//! (`eval-<protocol>-outcomes.jsonl`) are results in this format: there `correct` is the greedy
//! (argmax) decoding of the answer and `prob` its teacher-forced probability, so `correct: true`
//! with `prob < 0.5` is legitimate (each answer token can be the argmax while their product is
//! below 0.5); the reverse, `correct: false` with `prob > 0.5`, cannot happen (a token whose
//! teacher-forced probability exceeds 0.5 is the argmax) and is refused.

use super::phase::Outcome;
use super::protocol::{Prompt, Protocol};
use crate::task::{TaskConfig, BOS, QUERY};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How prompts are rendered as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextTemplate {
    /// The filler word (every filler token).
    pub filler: String,
    /// A record, with `{key}` and `{value}`.
    pub record: String,
    /// A query, with `{key}` (an answered context query appends ` {value}`).
    pub query: String,
}

impl Default for TextTemplate {
    fn default() -> Self {
        TextTemplate { filler: "the".into(), record: "{key}:{value}".into(), query: "{key}?".into() }
    }
}

impl TextTemplate {
    /// Checks the templates name their placeholders.
    pub fn validate(&self) -> Result<()> {
        if !self.record.contains("{key}") || !self.record.contains("{value}") {
            return Err(Error::invalid(
                "record template",
                format!("must contain {{key}} and {{value}}, got {:?}", self.record),
            ));
        }
        if !self.query.contains("{key}") {
            return Err(Error::invalid("query template", format!("must contain {{key}}, got {:?}", self.query)));
        }
        Ok(())
    }
}

/// One exported prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportedPrompt {
    /// Prompt id.
    pub id: usize,
    /// Protocol name.
    pub protocol: Protocol,
    /// Residue group of the target.
    pub group: usize,
    /// Source-key position of the target.
    pub target_pos: usize,
    /// Position of the scored query marker.
    pub query_pos: usize,
    /// Position of the first answer token.
    pub answer_pos: usize,
    /// First-key positions of every record.
    pub record_positions: Vec<usize>,
    /// Token ids up to (not including) the scored answer.
    pub tokens: Vec<u32>,
    /// The answer's token ids.
    pub answer: Vec<u32>,
    /// The prompt as text.
    pub text: String,
    /// The answer as text.
    pub answer_text: String,
}

fn word(task: &TaskConfig, tok: u32) -> String {
    if tok >= task.val_base() {
        format!("v{}", tok - task.val_base())
    } else if tok >= task.key_base() {
        format!("k{}", tok - task.key_base())
    } else {
        String::new()
    }
}

/// The prompt as exported (tokens cut before the scored answer, text rendered).
pub fn export_prompt(task: &TaskConfig, protocol: Protocol, p: &Prompt, tpl: &TextTemplate) -> ExportedPrompt {
    let s = &p.sample;
    let q = p.target();
    let (kl, vl) = (task.key_len, task.val_len);
    let join = |toks: &[u32]| toks.iter().map(|&t| word(task, t)).collect::<Vec<_>>().join(" ");
    let mut pieces: Vec<String> = Vec::new();
    let mut i = 0;
    while i < q.answer_pos {
        let t = s.tokens[i];
        if t == BOS {
            i += 1;
        } else if t == QUERY {
            let key = join(&s.tokens[i + 1..i + 1 + kl]);
            let mut text = tpl.query.replace("{key}", &key);
            if i + 1 + kl < q.answer_pos {
                text = format!("{text} {}", join(&s.tokens[i + 1 + kl..i + 1 + kl + vl]));
            }
            pieces.push(text);
            i += 1 + kl + vl;
        } else if t >= task.key_base() && t < task.val_base() {
            let key = join(&s.tokens[i..i + kl]);
            let value = join(&s.tokens[i + kl..i + kl + vl]);
            pieces.push(tpl.record.replace("{key}", &key).replace("{value}", &value));
            i += kl + vl;
        } else {
            pieces.push(tpl.filler.clone());
            i += 1;
        }
    }
    ExportedPrompt {
        id: p.id,
        protocol,
        group: p.group,
        target_pos: p.target_pos,
        query_pos: q.query_pos,
        answer_pos: q.answer_pos,
        record_positions: s.record_positions.clone(),
        tokens: s.tokens[..q.answer_pos].to_vec(),
        answer: q.answer.clone(),
        text: pieces.join(" "),
        answer_text: join(&q.answer),
    }
}

/// The prompts as JSONL.
pub fn export_jsonl(task: &TaskConfig, protocol: Protocol, prompts: &[Prompt], tpl: &TextTemplate) -> Result<String> {
    tpl.validate()?;
    let mut out = String::new();
    for p in prompts {
        let line = serde_json::to_string(&export_prompt(task, protocol, p, tpl))
            .map_err(|e| Error::invalid("export", e.to_string()))?;
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

/// What the export says of one prompt: its residue group and the positions that set its
/// phase and depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportEntry {
    /// Residue group of the target.
    pub group: usize,
    /// Source-key position of the target (its phase is `target_pos mod S`).
    pub target_pos: usize,
    /// Position of the scored query marker (depth = `query_pos - target_pos`), when exported.
    pub query_pos: Option<usize>,
}

/// The exported prompts an audit's results are checked against, by `id`, read from the JSONL
/// that `audit export` wrote. Positions come from here, never from the results file.
pub type Manifest = std::collections::HashMap<u64, ExportEntry>;

/// Reads an export (`audit export` JSONL) as a [`Manifest`]; a repeated id, a line without
/// `id`, `group` and `target_pos`, or a `query_pos` before the target is an error naming the
/// line.
pub fn parse_manifest(text: &str) -> Result<Manifest> {
    let mut out = Manifest::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |field: &str| format!("export line {}: {field}", i + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| Error::invalid(at("JSON"), e.to_string()))?;
        let get = |f: &str| {
            v.get(f)
                .and_then(Value::as_u64)
                .ok_or_else(|| Error::invalid(at(f), "missing or not a non-negative integer"))
        };
        let (id, group, pos) = (get("id")?, get("group")?, get("target_pos")?);
        let query_pos = match v.get("query_pos") {
            None => None,
            Some(_) => Some(get("query_pos")? as usize),
        };
        let entry = ExportEntry { group: group as usize, target_pos: pos as usize, query_pos };
        if entry.query_pos.is_some_and(|q| q < entry.target_pos) {
            return Err(Error::invalid(
                at("query_pos"),
                format!("{} is before target_pos {pos}", query_pos.unwrap_or(0)),
            ));
        }
        if out.insert(id, entry).is_some() {
            return Err(Error::invalid(at("id"), format!("id {id} is exported twice")));
        }
    }
    if out.is_empty() {
        return Err(Error::invalid("export", "no exported prompts"));
    }
    Ok(out)
}

/// The per-prompt records of the pre-registered phase test (`analysis::phase_test`) for
/// outcomes of exported prompts: phase and depth from the export's positions (the results file
/// is trusted for correctness only). `None` when the export carries no `query_pos`.
pub fn phase_records(
    manifest: &Manifest,
    outcomes: &[Outcome],
) -> Option<Vec<crate::analysis::phase_test::PhaseRecord>> {
    outcomes
        .iter()
        .map(|o| {
            let e = manifest.get(&(o.id as u64))?;
            let q = e.query_pos?;
            Some(crate::analysis::phase_test::PhaseRecord {
                position: e.target_pos,
                depth: q - e.target_pos,
                correct: o.correct,
            })
        })
        .collect()
}

/// The phase-test records of results that carry their own `position` and `depth` (the suite's
/// outcome files), or `None` when some line lacks either.
pub fn own_records(outcomes: &[Outcome]) -> Option<Vec<crate::analysis::phase_test::PhaseRecord>> {
    outcomes
        .iter()
        .map(|o| {
            Some(crate::analysis::phase_test::PhaseRecord {
                position: o.position?,
                depth: o.depth?,
                correct: o.correct,
            })
        })
        .collect()
}

/// Lines of results read between two polls of the stop check (well under a second).
pub const STOP_LINES: usize = 4096;

/// Reads per-sample results (see the module docs); `m` is the residue modulus. Errors name
/// the line (1-based) and the field.
pub fn parse_results(text: &str, m: usize) -> Result<Vec<Outcome>> {
    parse_results_checked(text, m, None, &crate::stop::Stop::never())
}

/// [`parse_results`], refusing what would fabricate or distort significance: a repeated `id`
/// (the same results counted twice), `correct` contradicting `prob`, a `group` that is not
/// `target_pos mod M` when the line carries `target_pos`, and, given the export's
/// `manifest`, a missing `id`, an id that was never exported, or a group other than the
/// exported one. `stop` is polled every [`STOP_LINES`] lines.
pub fn parse_results_checked(
    text: &str,
    m: usize,
    manifest: Option<&Manifest>,
    stop: &crate::stop::Stop,
) -> Result<Vec<Outcome>> {
    read_results(text.as_bytes(), m, manifest, u64::MAX, 0, stop)
}

/// [`parse_results_checked`] streamed from `reader` (memory: the outcomes read, never the
/// whole text), with at most `max_lines` result lines (the work bound of `audit analyze`, an
/// error naming it beyond). `expected_lines` (0: unknown) sizes the outcomes once, so that
/// memory is the outcomes themselves and not up to twice that from a growing vector. The one reader of per-sample results: `audit analyze` and the
/// report's loader of outcome files (`lab::load`) both read through it. The suite's optional
/// columns (`arm`, `preset`, `seed`, `protocol`, `family`, `phase`) are read where present,
/// each of its type.
pub fn read_results(
    mut reader: impl std::io::BufRead,
    m: usize,
    manifest: Option<&Manifest>,
    max_lines: u64,
    expected_lines: u64,
    stop: &crate::stop::Stop,
) -> Result<Vec<Outcome>> {
    let capacity = expected_lines.min(max_lines) as usize;
    let mut out = Vec::with_capacity(capacity);
    let mut seen: std::collections::HashMap<usize, usize> = std::collections::HashMap::with_capacity(capacity);
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(|e| Error::invalid("results", e.to_string()))?;
        if read == 0 {
            break;
        }
        if n % STOP_LINES == 0 {
            stop.check("audit analyze (reading results)")?;
        }
        n += 1;
        let at = |field: &str| format!("line {n}: {field}");
        let line = std::str::from_utf8(&buf).map_err(|e| Error::invalid(at("text"), format!("not UTF-8: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        if out.len() as u64 >= max_lines {
            return Err(Error::invalid(
                at("results"),
                format!("more than {max_lines} result lines, above the limit (MAX_RESULT_LINES); split the results"),
            ));
        }
        let v: Value = serde_json::from_str(line).map_err(|e| Error::invalid(at("JSON"), e.to_string()))?;
        let obj = v.as_object().ok_or_else(|| Error::invalid(at("line"), "must be a JSON object"))?;
        let group = match obj.get("group") {
            None => return Err(Error::invalid(at("group"), "missing (an integer residue group is required)")),
            Some(g) => g
                .as_u64()
                .ok_or_else(|| Error::invalid(at("group"), format!("must be a non-negative integer, got {g}")))?,
        };
        if group >= m as u64 {
            return Err(Error::invalid(at("group"), format!("unknown group {group}: allowed 0..{m}")));
        }
        let id = match obj.get("id") {
            None if manifest.is_some() => {
                return Err(Error::invalid(at("id"), "missing (required to check the results against --export)"))
            }
            None => out.len(),
            Some(x) => x
                .as_u64()
                .ok_or_else(|| Error::invalid(at("id"), format!("must be a non-negative integer, got {x}")))?
                as usize,
        };
        if let Some(first) = seen.insert(id, n) {
            return Err(Error::invalid(
                at("id"),
                format!("id {id} repeats line {first}; each prompt's result must appear once"),
            ));
        }
        let uint = |field: &str| -> Result<Option<u64>> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| Error::invalid(at(field), format!("must be a non-negative integer, got {x}"))),
            }
        };
        for field in ["target_pos", "position"] {
            if let Some(pos) = uint(field)? {
                if pos % m as u64 != group {
                    return Err(Error::invalid(
                        at("group"),
                        format!(
                            "group {group} contradicts {field} {pos} (mod {m} = {}); is --modulus right?",
                            pos % m as u64
                        ),
                    ));
                }
            }
        }
        let position = uint("position")?.map(|p| p as usize);
        let depth = uint("depth")?.map(|d| d as usize);
        if let Some(manifest) = manifest {
            match manifest.get(&(id as u64)) {
                None => return Err(Error::invalid(at("id"), format!("id {id} was never exported"))),
                Some(&ExportEntry { group: g, .. }) if g as u64 != group => {
                    return Err(Error::invalid(
                        at("group"),
                        format!("group {group} contradicts the export, which gave id {id} group {g}"),
                    ))
                }
                Some(_) => {}
            }
        }
        let prob = match obj.get("prob") {
            None | Some(Value::Null) => None,
            Some(x) => {
                let p = x.as_f64().ok_or_else(|| Error::invalid(at("prob"), format!("must be a number, got {x}")))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(Error::invalid(at("prob"), format!("must be in [0, 1], got {p}")));
                }
                Some(p)
            }
        };
        let correct = match (obj.get("correct"), prob) {
            // `correct` is the greedy decoding, `prob` the teacher-forced probability: a miss
            // whose every token had probability above 0.5 is impossible (see the module doc).
            (Some(Value::Bool(false)), Some(p)) if p > 0.5 => {
                return Err(Error::invalid(
                    at("correct"),
                    format!("false contradicts prob {p}: an answer whose teacher-forced probability exceeds 0.5 is the greedy decoding, so it is correct; give one or make them agree"),
                ))
            }
            (Some(Value::Bool(b)), _) => *b,
            (Some(x), _) => return Err(Error::invalid(at("correct"), format!("must be true or false, got {x}"))),
            (None, Some(p)) => p >= 0.5,
            (None, None) => return Err(Error::invalid(at("correct"), "missing (give `correct` or `prob`)")),
        };
        let text = |field: &str| -> Result<Option<String>> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(x)) => Ok(Some(x.clone())),
                Some(x) => Err(Error::invalid(at(field), format!("must be a string, got {x}"))),
            }
        };
        out.push(Outcome {
            id,
            group: group as usize,
            correct,
            prob,
            position,
            depth,
            arm: text("arm")?,
            preset: text("preset")?,
            seed: uint("seed")?,
            protocol: text("protocol")?,
            family: uint("family")?.map(|f| f as usize),
            phase: uint("phase")?.map(|f| f as usize),
            predicted: text("predicted")?,
        });
    }
    if out.is_empty() {
        return Err(Error::invalid("results", "no result lines"));
    }
    Ok(out)
}
