//! What reading a run's event log, or rebuilding its reports, can fail with.

use crate::events::SinkError;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{path}: line {line} is not an event: {message}")]
    BadLine { path: String, line: usize, message: String },
    #[error("{0}: no events (is this a run directory?)")]
    Empty(String),
}
