//! Sweeps: expanding named axes into arms (conditions filter the product, names and overrides
//! are templates filled with the axis values), and the small helpers of arm names and
//! override paths.

use super::file::{Sweep, MAX_UNITS};
use crate::{Error, Result};
use serde_json::Value;
use std::collections::BTreeSet;

impl Sweep {
    /// Every combination of axis values (axis name, value), outermost axis first, that
    /// satisfies `require`.
    pub fn combinations(&self) -> Result<Vec<Vec<(String, Value)>>> {
        if self.axes.is_empty() {
            return Err(Error::invalid("plan.sweep.axes", "needs at least one axis"));
        }
        let mut names = BTreeSet::new();
        for a in &self.axes {
            check_name(&a.name, "plan.sweep.axes")?;
            if !names.insert(a.name.as_str()) {
                return Err(Error::invalid("plan.sweep.axes", format!("axis '{}' appears twice", a.name)));
            }
            if a.values.is_empty() {
                return Err(Error::invalid("plan.sweep.axes", format!("axis '{}' has no values", a.name)));
            }
            for v in &a.values {
                if !(v.is_number() || v.is_string()) {
                    return Err(Error::invalid(
                        "plan.sweep.axes",
                        format!("axis '{}': values must be numbers or strings, got {v}", a.name),
                    ));
                }
            }
        }
        let conds: Vec<Condition> = self.require.iter().map(|r| Condition::parse(r, &names)).collect::<Result<_>>()?;
        let total = self.axes.iter().map(|a| a.values.len()).try_fold(1usize, |t, n| t.checked_mul(n));
        if total.is_none_or(|t| t > MAX_UNITS) {
            return Err(Error::invalid("plan.sweep", format!("has more than {MAX_UNITS} combinations")));
        }
        let mut out: Vec<Vec<(String, Value)>> = vec![vec![]];
        for a in &self.axes {
            out = out
                .into_iter()
                .flat_map(|c| {
                    a.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((a.name.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        let mut kept = Vec::new();
        for c in out {
            let mut ok = true;
            for cond in &conds {
                ok &= cond.holds(&c)?;
            }
            if ok {
                kept.push(c);
            }
        }
        if kept.is_empty() {
            return Err(Error::invalid("plan.sweep.require", "no combination of axis values satisfies it"));
        }
        Ok(kept)
    }
}

/// `a OP b` over axis values and numbers.
struct Condition {
    text: String,
    lhs: String,
    op: String,
    rhs: String,
}

impl Condition {
    fn parse(text: &str, axes: &BTreeSet<&str>) -> Result<Condition> {
        let bad = |why: String| Error::invalid("plan.sweep.require", format!("'{text}': {why}"));
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [lhs, op, rhs] = parts[..] else {
            return Err(bad("must be 'a OP b' with spaces, OP one of < <= == != >= >".into()));
        };
        if !["<", "<=", "==", "!=", ">=", ">"].contains(&op) {
            return Err(bad(format!("unknown operator '{op}' (allowed: < <= == != >= >)")));
        }
        for x in [lhs, rhs] {
            if !axes.contains(x) && x.parse::<f64>().is_err() {
                return Err(bad(format!("'{x}' is neither an axis nor a number")));
            }
        }
        Ok(Condition { text: text.into(), lhs: lhs.into(), op: op.into(), rhs: rhs.into() })
    }

    fn holds(&self, combo: &[(String, Value)]) -> Result<bool> {
        let num = |x: &str| -> Result<f64> {
            match combo.iter().find(|(k, _)| k == x) {
                Some((_, v)) => v.as_f64().ok_or_else(|| {
                    Error::invalid(
                        "plan.sweep.require",
                        format!("'{}': axis {x} has a non-number value {v}", self.text),
                    )
                }),
                None => Ok(x.parse::<f64>().unwrap_or(f64::NAN)),
            }
        };
        let (a, b) = (num(&self.lhs)?, num(&self.rhs)?);
        Ok(match self.op.as_str() {
            "<" => a < b,
            "<=" => a <= b,
            "==" => a == b,
            "!=" => a != b,
            ">=" => a >= b,
            _ => a > b,
        })
    }
}

/// Names become directory names: letters, digits, `.`, `_`, `-`, not starting with `.` or `-`.
pub(super) fn check_name(name: &str, field: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['.', '-'])
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("name '{name}' must be 1-100 of A-Z a-z 0-9 . _ - (not starting with . or -)"),
        ))
    }
}

/// A value as text (strings without quotes).
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn fill(template: &str, combo: &[(String, Value)]) -> String {
    combo.iter().fold(template.to_string(), |t, (k, v)| t.replace(&format!("{{{k}}}"), &text(v)))
}

pub(super) fn fill_value(v: &Value, combo: &[(String, Value)]) -> Value {
    match v {
        Value::String(s) => match combo.iter().find(|(k, _)| s == &format!("{{{k}}}")) {
            Some((_, x)) => x.clone(),
            None => Value::String(fill(s, combo)),
        },
        Value::Array(a) => Value::Array(a.iter().map(|x| fill_value(x, combo)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), fill_value(x, combo))).collect()),
        other => other.clone(),
    }
}

/// Sets `path` (dotted) in the serialised config to `value`, merging objects; a path the config
/// does not have is an error naming it.
pub(super) fn set_path(root: &mut Value, path: &str, value: &Value, field: &str) -> Result<()> {
    let mut cur = root;
    let keys: Vec<&str> = path.split('.').collect();
    for (i, k) in keys.iter().enumerate() {
        let here = keys[..=i].join(".");
        let Some(next) = cur.as_object_mut().and_then(|o| o.get_mut(*k)) else {
            return Err(Error::invalid(field, format!("the config has no field '{here}'")));
        };
        cur = next;
    }
    match value {
        Value::Object(o) => {
            if !cur.is_object() {
                return Err(Error::invalid(field, format!("'{path}' is a value, not a section")));
            }
            for (k, x) in o {
                set_path(cur, k, x, field)
                    .map_err(|_| Error::invalid(field, format!("the config has no field '{path}.{k}'")))?;
            }
        }
        other => {
            if cur.is_object() {
                return Err(Error::invalid(field, format!("'{path}' is a section; give its fields")));
            }
            *cur = other.clone();
        }
    }
    Ok(())
}
