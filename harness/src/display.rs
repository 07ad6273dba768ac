//! `Display` for types whose files are being restructured: what a person reads in a report
//! names a value the way scenario files and `summary.json` do, never as Rust's Debug output.
//!
//! Interim home: `Contract`'s impl belongs beside the enum in the ledger module.

use crate::ledger::Contract;
use std::fmt;

/// `plp` or `flush`: the name scenario files use (`contract = "flush"`), which `FromStr`
/// parses and serde writes.
impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Contract::Plp => "plp",
            Contract::Flush => "flush",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contracts_display_as_scenario_files_and_serde_name_them() {
        for c in [Contract::Plp, Contract::Flush] {
            let shown = c.to_string();
            assert_eq!(shown.parse::<Contract>(), Ok(c));
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::Value::String(shown));
        }
        assert_eq!(format!("the drive broke its {} promise", Contract::Flush), "the drive broke its flush promise");
    }
}
