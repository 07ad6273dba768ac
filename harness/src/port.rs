//! Ports of the device under test.
//!
//! A port is one [`PortId`], mapped once (in the [`RunPlan`](crate::scenario::RunPlan)) to how
//! it is reached, which controller port faults it, and its sector tag: every sector written
//! through a port carries its id (`docs/FORMAT.md`), so a verifier can tell which port wrote
//! what. Today a run has one port, `A` (id 0); the run header records the table.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The id of one port of the device under test, as the sector tag carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PortId(pub u8);

impl PortId {
    /// The only port of a single-port run.
    pub const A: PortId = PortId(0);

    /// The conventional name of the port: `A` for 0, `B` for 1, ... (`P26` beyond `Z`).
    pub fn default_name(self) -> String {
        if self.0 < 26 {
            char::from(b'A' + self.0).to_string()
        } else {
            format!("P{}", self.0)
        }
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.default_name())
    }
}

/// One entry of a run's port table (the run header's `ports`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortEntry {
    pub id: PortId,
    pub name: String,
}

impl PortEntry {
    /// The table of a single-port run: port `A`.
    pub fn single() -> Vec<PortEntry> {
        vec![PortEntry { id: PortId::A, name: PortId::A.default_name() }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ids_name_themselves_by_letter() {
        assert_eq!(PortId::A.to_string(), "A");
        assert_eq!(PortId(1).to_string(), "B");
        assert_eq!(PortId(25).to_string(), "Z");
        assert_eq!(PortId(26).to_string(), "P26");
        assert_eq!(serde_json::to_string(&PortId(1)).unwrap(), "1");
    }
}
