//! Command-line overrides of a scenario (`--set cycles.count=5`): a dotted path into the file
//! and a TOML value, applied to the file's table before it is read, so that the result is
//! checked exactly as a file holding those values would be.

use super::{Scenario, ScenarioError};
use std::fmt;
use std::str::FromStr;

/// One `PATH=VALUE` override. `PATH` is dotted keys (`target.path`), where a number indexes
/// an array of tables (`ports.1.path`); `VALUE` is a TOML value (`5`, `true`, `"a b"`,
/// `[1, 2]`), or, when it does not parse as one, the text itself as a string, so that
/// `target.path=/dev/nvme2n1` needs no quotes.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    path: Vec<String>,
    value: toml::Value,
    text: String,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why an override cannot be read or applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("`{0}`: an override is PATH=VALUE (e.g. cycles.count=5)")]
    NotPathValue(String),
    #[error("`{text}`: `{key}` is not a key (keys are letters, digits, `_` and `-`, joined by `.`)")]
    BadKey { text: String, key: String },
    /// `path` holds a value of another type where the override needs a table to go into.
    #[error("`{path}` is {article} {kind}, not a table", article = if matches!(*kind, "integer" | "array") { "an" } else { "a" })]
    NotATable { path: String, kind: &'static str },
    #[error("`{at}`: the scenario's `{array}` has {len} entries, numbered from 0")]
    NoSuchEntry { at: String, array: String, len: usize },
}

/// A value alone, read as the right-hand side of `v = ...`.
#[derive(serde::Deserialize)]
struct Rhs {
    v: toml::Value,
}

impl FromStr for Override {
    type Err = OverrideError;

    fn from_str(text: &str) -> Result<Override, OverrideError> {
        let text = text.trim();
        let Some((path, value)) = text.split_once('=') else {
            return Err(OverrideError::NotPathValue(text.to_string()));
        };
        let path: Vec<String> = path.trim().split('.').map(|k| k.trim().to_string()).collect();
        if let Some(bad) = path.iter().find(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
            return Err(OverrideError::BadKey { text: text.to_string(), key: bad.clone() });
        }
        let value = value.trim();
        let value = match toml::from_str::<Rhs>(&format!("v = {value}")) {
            Ok(r) => r.v,
            Err(_) => toml::Value::String(value.to_string()),
        };
        Ok(Override { path, value, text: text.to_string() })
    }
}

impl Override {
    /// Builds the override that sets `path` (dotted) to `value`.
    pub fn new(path: &str, value: toml::Value) -> Override {
        let text = format!("{path}={value}");
        Override { path: path.split('.').map(str::to_string).collect(), value, text }
    }

    /// The dotted path, as given.
    pub fn path(&self) -> String {
        self.path.join(".")
    }

    /// Sets the value in `doc`, making the tables on the way that the file lacks.
    fn apply(&self, doc: &mut toml::Value) -> Result<(), OverrideError> {
        let mut here = doc;
        for (i, key) in self.path.iter().enumerate() {
            let at = self.path[..=i].join(".");
            let last = i + 1 == self.path.len();
            here = match here {
                toml::Value::Table(t) => {
                    if last {
                        t.insert(key.clone(), self.value.clone());
                        return Ok(());
                    }
                    t.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()))
                }
                toml::Value::Array(a) => {
                    let n = a.len();
                    let slot = key.parse::<usize>().ok().and_then(|k| a.get_mut(k)).ok_or_else(|| OverrideError::NoSuchEntry {
                        at,
                        array: self.path[..i].join("."),
                        len: n,
                    })?;
                    if last {
                        *slot = self.value.clone();
                        return Ok(());
                    }
                    slot
                }
                other => return Err(OverrideError::NotATable { path: self.path[..i].join("."), kind: other.type_str() }),
            };
        }
        unreachable!("the loop returns at the last key")
    }
}

/// `origin` as the overrides leave it: `scenarios/x.toml with --set a=1 --set b=2`.
pub fn origin_with(origin: &str, overrides: &[Override]) -> String {
    let mut o = origin.to_string();
    for (i, ov) in overrides.iter().enumerate() {
        o.push_str(if i == 0 { " with --set " } else { " --set " });
        o.push_str(&ov.text);
    }
    o
}

/// Reads `doc` (the file's table with overrides applied) as a scenario, without validating:
/// the scenario or the reader's message (what an override is blamed for); Err when the table
/// cannot be written out to be read.
fn read(doc: &toml::Value) -> Result<Result<Scenario, Message>, ScenarioError> {
    let text = toml::to_string(doc).map_err(|e| ScenarioError::Serialize(e.to_string()))?;
    Ok(toml::from_str::<Scenario>(&text).map_err(|e| Message(e.message().trim_end().to_string())))
}

/// What the scenario reader said of a table, compared across tables to find the override
/// that brought the mistake in.
#[derive(PartialEq)]
struct Message(String);

/// The file's table (already known to parse, of the right version) with `overrides` applied,
/// read and validated. A value of the wrong type or a key the format lacks is blamed on the
/// first override that brings it in.
/// `file_error` gives the error the file alone makes, with its line and column.
pub(super) fn apply_all(
    base: toml::Table,
    origin: &str,
    overrides: &[Override],
    file_error: impl FnOnce() -> ScenarioError,
) -> Result<Scenario, ScenarioError> {
    let full = origin_with(origin, overrides);
    let blame = |ov: &Override, message: String| ScenarioError::Override { origin: origin.to_string(), set: ov.text.clone(), message };
    let base = toml::Value::Table(base);
    let mut doc = base.clone();
    for ov in overrides {
        ov.apply(&mut doc).map_err(|e| blame(ov, e.to_string()))?;
    }
    let s = match read(&doc)? {
        Ok(s) => s,
        Err(message) => {
            let same = |r: Result<Scenario, Message>| r.is_err_and(|m| m == message);
            let Message(text) = &message;
            let mut prefix = base;
            let mut culprit = None;
            if same(read(&prefix)?) {
                // The file's own mistake, which no override mends.
                return Err(file_error());
            }
            for ov in overrides {
                ov.apply(&mut prefix).map_err(|e| blame(ov, e.to_string()))?;
                if same(read(&prefix)?) {
                    culprit = Some(ov);
                    break;
                }
            }
            return Err(match culprit {
                Some(ov) => blame(ov, text.clone()),
                None => ScenarioError::Invalid { origin: full, field: "--set".into(), message: text.clone() },
            });
        }
    };
    s.validate(&full)?;
    Ok(s)
}
