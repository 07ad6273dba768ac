//! What the lab's errors share: an I/O step that failed, named ([`IoStep`]), and an error's
//! chain of causes as one line ([`chain`]), for the answers the host writes into the share and
//! the notes setup prints.

use std::error::Error;

/// An I/O step that failed: what it was doing (`cannot create /x`), and the OS's error as its
/// source.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct IoStep {
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

/// Names the step an `io::Result` was.
pub(crate) trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, IoStep>;
}

impl<T> Doing<T> for std::io::Result<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, IoStep> {
        self.map_err(|source| IoStep { what: what(), source })
    }
}

/// `e` and its causes, `: `-separated, each said once (a cause its parent's text already
/// holds is left out), as the binary prints an error.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_names_itself_and_keeps_the_os_error_as_its_cause() {
        let e = std::fs::read("/nonexistent/faultline-lab").doing(|| "cannot read /nonexistent/faultline-lab".into()).unwrap_err();
        assert_eq!(e.to_string(), "cannot read /nonexistent/faultline-lab");
        assert!(chain(&e).starts_with("cannot read /nonexistent/faultline-lab: No such file"), "{}", chain(&e));
    }
}
