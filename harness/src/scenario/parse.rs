//! Reading and writing scenario files: the version first, then the whole file, with every
//! syntax or type error located by line and column.

use super::overrides::{self, Override};
use super::{Scenario, ScenarioError, FORMAT_VERSION};
use serde::Deserialize;
use std::path::Path;

/// Finds only the version, so that a file of another version is refused for its version and
/// not for keys this version does not know.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: Option<toml::Spanned<toml::Value>>,
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn syntax_error(origin: &str, text: &str, e: &toml::de::Error) -> ScenarioError {
    let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
    ScenarioError::Syntax { origin: origin.to_string(), line, column, message: e.message().trim_end().to_string() }
}

impl Scenario {
    /// Parses and validates a scenario; `origin` (usually the file name) prefixes every error.
    pub fn from_toml(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml_with(text, origin, &[])
    }

    /// As [`Scenario::from_toml`], with `overrides` (`--set`) applied to the file's values
    /// before they are read: the result is checked as a file holding them would be, and an
    /// error names the override that brought it in.
    pub fn from_toml_with(text: &str, origin: &str, overrides: &[Override]) -> Result<Scenario, ScenarioError> {
        let probe: VersionProbe = toml::from_str(text).map_err(|e| syntax_error(origin, text, &e))?;
        match probe.format_version {
            None => {
                return Err(ScenarioError::Syntax {
                    origin: origin.to_string(),
                    line: 1,
                    column: 1,
                    message: format!("missing `format_version = {FORMAT_VERSION}` (the first key of every scenario)"),
                })
            }
            Some(v) if v.get_ref().as_integer() != Some(FORMAT_VERSION as i64) => {
                let (line, column) = line_column(text, v.span().start);
                let Some(found) = v.get_ref().as_integer() else {
                    return Err(ScenarioError::Syntax {
                        origin: origin.to_string(),
                        line,
                        column,
                        message: format!("format_version must be an integer ({FORMAT_VERSION})"),
                    });
                };
                return Err(ScenarioError::Version { origin: origin.to_string(), line, column, found });
            }
            Some(_) => {}
        }
        if !overrides.is_empty() {
            let base: toml::Table = toml::from_str(text).map_err(|e| syntax_error(origin, text, &e))?;
            let file_error = || match toml::from_str::<Scenario>(text) {
                Err(e) => syntax_error(origin, text, &e),
                Ok(_) => ScenarioError::Invalid {
                    origin: origin.to_string(),
                    field: "--set".into(),
                    message: "the overrides cannot be read back".into(),
                },
            };
            return overrides::apply_all(base, origin, overrides, file_error);
        }
        let s: Scenario = toml::from_str(text).map_err(|e| syntax_error(origin, text, &e))?;
        s.validate(origin)?;
        Ok(s)
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::load_with(path, &[])
    }

    /// Reads a scenario file with `overrides` applied ([`Scenario::from_toml_with`]).
    pub fn load_with(path: &Path, overrides: &[Override]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { path: path.to_path_buf(), source })?;
        Scenario::from_toml_with(&text, &path.display().to_string(), overrides)
    }

    /// The scenario as TOML; [`Scenario::from_toml`] reads it back equal.
    pub fn to_toml(&self) -> Result<String, ScenarioError> {
        toml::to_string_pretty(self).map_err(|e| ScenarioError::Serialize(e.to_string()))
    }
}
