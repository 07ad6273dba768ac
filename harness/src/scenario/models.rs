//! The simulated drive's models by name, as a command line gives them (`run --model rollback`,
//! `lab run --sim honest-plp`, `emulate --model ...`): the scenario's own model types, with
//! the parameters the demo gives them. A name is the scenario's `kind` in kebab case, read off
//! the type's serde spelling, so the two cannot drift apart.

use super::{DualSimModel, Scenario, SimModel};

/// A model of the simulated drive: a single-port drive's (what a power cut does to the media),
/// or a dual-port drive's (what a fault of one port does to the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamedModel {
    Drive(SimModel),
    Dual(DualSimModel),
}

/// Every model a name gives, with its parameters, in the order `--help` lists them.
pub const NAMED_MODELS: &[NamedModel] = &[
    NamedModel::Drive(SimModel::HonestPlp),
    NamedModel::Drive(SimModel::HonestVolatile),
    NamedModel::Drive(SimModel::LiesAboutFlush),
    NamedModel::Drive(SimModel::TornWrites),
    NamedModel::Drive(SimModel::Misdirects { per_mille: 2 }),
    NamedModel::Drive(SimModel::BitRot { flips_per_cut: 1 }),
    NamedModel::Drive(SimModel::Rollback { writes_per_cut: 1 }),
    NamedModel::Drive(SimModel::ReadErrors { sectors_per_cut: 1 }),
    NamedModel::Drive(SimModel::ReadHangs { sectors_per_cut: 1 }),
    NamedModel::Drive(SimModel::DiesAfterCuts { cuts: 50 }),
    NamedModel::Drive(SimModel::Resurrect { after_cuts: 1 }),
    NamedModel::Drive(SimModel::ReplayCorrupts { replay_ms: 1000, sectors_per_cut: 2 }),
    NamedModel::Drive(SimModel::PlpRecharge { recharge_ms: 50 }),
    NamedModel::Drive(SimModel::PfailMissesSag { detect_mv: 9_000 }),
    NamedModel::Drive(SimModel::LosesDeallocate { per_cut: 1 }),
    NamedModel::Drive(SimModel::DeallocatesWrongRange { shift_sectors: 8 }),
    NamedModel::Drive(SimModel::TearsWriteZeroes),
    NamedModel::Drive(SimModel::CachesFormat),
    NamedModel::Drive(SimModel::FormatStaysInProgress),
    NamedModel::Dual(DualSimModel::DualHonest),
    NamedModel::Dual(DualSimModel::DualFreezeOnPull { stall_ms: 800 }),
    NamedModel::Dual(DualSimModel::DualGhostWrites { after_writes: 20000 }),
    NamedModel::Dual(DualSimModel::DualStalePort { for_ms: 5000 }),
    NamedModel::Dual(DualSimModel::DualDropCacheOnReset),
    NamedModel::Dual(DualSimModel::DualLoseCacheAtCut),
];

/// Why a model could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("`{given}` is not a model of the simulated drive (one of: {})", .names.join(", "))]
    Unknown { given: String, names: Vec<String> },
    #[error("--model: the scenario's target is not the simulated drive")]
    NotSimulated,
    #[error("--model {0}: the scenario's simulated drive is single-port (target.sim.dual)")]
    SinglePort(String),
}

impl NamedModel {
    /// The model's name: its scenario `kind` in kebab case (`dies-after-cuts`).
    pub fn name(self) -> String {
        let v = match self {
            NamedModel::Drive(m) => serde_json::to_value(m),
            NamedModel::Dual(m) => serde_json::to_value(m),
        };
        v.ok().and_then(|v| v["kind"].as_str().map(|k| k.replace('_', "-"))).unwrap_or_default()
    }

    /// Every name, in [`NAMED_MODELS`] order.
    pub fn names() -> Vec<String> {
        NAMED_MODELS.iter().map(|m| m.name()).collect()
    }

    /// The model `name` names.
    pub fn parse(name: &str) -> Result<NamedModel, ModelError> {
        NAMED_MODELS
            .iter()
            .copied()
            .find(|m| m.name() == name)
            .ok_or_else(|| ModelError::Unknown { given: name.to_string(), names: Self::names() })
    }

    /// What the model does, in a line (for `--help`).
    pub fn help(self) -> &'static str {
        match self {
            NamedModel::Drive(m) => match m {
                SimModel::HonestPlp => "power-loss protected and honest: completed writes survive every cut",
                SimModel::HonestVolatile => "volatile cache, honest about flushes",
                SimModel::LiesAboutFlush => "volatile cache whose flushes do nothing",
                SimModel::TornWrites => "breaks atomic units of the writes in flight at a cut",
                SimModel::Misdirects { .. } => "writes 2 in 1,000 writes at a wrong address",
                SimModel::BitRot { .. } => "flips a bit in one sector at each power-on",
                SimModel::Rollback { .. } => "reverts a recent completed write at each power-on",
                SimModel::ReadErrors { .. } => "makes a sector unreadable (EIO) at each power-on",
                SimModel::ReadHangs { .. } => "makes a sector's reads hang (ETIMEDOUT) at each power-on",
                SimModel::DiesAfterCuts { .. } => "never comes back after its 50th cut",
                SimModel::Resurrect { .. } => "brings back, a cut later, what writes in flight at a cut landed over",
                SimModel::ReplayCorrupts { .. } => "a cut while its journal replays after power-on corrupts 2 replayed sectors",
                SimModel::PlpRecharge { .. } => "a cut within 50 ms of power-on, capacitors not recharged, loses the cache",
                SimModel::PfailMissesSag { .. } => {
                    "its power-fail detector misses a sag to 9-10 V: writes in flight land corrupt, unreported"
                }
                SimModel::LosesDeallocate { .. } => "undoes its most recent durable deallocate at each cut (old data back)",
                SimModel::DeallocatesWrongRange { .. } => "applies every deallocate 8 sectors further on than asked",
                SimModel::TearsWriteZeroes => "keeps only the first atomic unit of a durable Write Zeroes at a cut",
                SimModel::CachesFormat => "completes a format with its zeros in the volatile cache (old data back at a cut)",
                SimModel::FormatStaysInProgress => "after a format cut short, fails every read and write until formatted again",
            },
            NamedModel::Dual(m) => match m {
                DualSimModel::DualHonest => "dual-port drive, both ports honest",
                DualSimModel::DualFreezeOnPull { .. } => "dual-port drive: pulling or resetting one port stalls the other for 800 ms",
                DualSimModel::DualGhostWrites { .. } => {
                    "dual-port drive: a pulled port's in-flight writes land 20,000 writes later, over newer data"
                }
                DualSimModel::DualStalePort { .. } => "dual-port drive: after a fault, the other port serves stale copies for 5 s",
                DualSimModel::DualDropCacheOnReset => "dual-port drive: resetting or pulling one port drops the shared volatile cache",
                DualSimModel::DualLoseCacheAtCut => "dual-port drive: a power cut loses the shared volatile cache it claims is protected",
            },
        }
    }

    /// The single-port drive's model: a dual-port model keeps the drive honest at power cuts.
    pub fn sim_model(self) -> SimModel {
        match self {
            NamedModel::Drive(m) => m,
            NamedModel::Dual(_) => SimModel::HonestPlp,
        }
    }

    /// The dual-port model this is, if it is one.
    pub fn dual_model(self) -> Option<DualSimModel> {
        match self {
            NamedModel::Dual(m) => Some(m),
            NamedModel::Drive(_) => None,
        }
    }

    /// Sets the simulated drive's model in `s`: a dual-port model on a dual-port drive, a
    /// single-port one (what a power cut does) on either.
    pub fn apply(self, s: &mut Scenario) -> Result<(), ModelError> {
        let sim = s.target.sim.as_mut().ok_or(ModelError::NotSimulated)?;
        match (self, sim.dual.as_mut()) {
            (NamedModel::Dual(m), Some(d)) => d.model = m,
            (NamedModel::Dual(_), None) => return Err(ModelError::SinglePort(self.name())),
            (NamedModel::Drive(m), _) => sim.model = m,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind the scenario's schema knows for the simulated drive's models has a name, and
    /// every name parses back to its model.
    #[test]
    fn every_model_of_the_scenario_has_one_name() {
        let schema = serde_json::to_value(super::super::scenario_schema()).unwrap();
        let defs = schema.get("$defs").or_else(|| schema.get("definitions")).expect("the schema's definitions");
        let mut kinds = Vec::new();
        for key in ["SimModel", "DualSimModel"] {
            collect_kinds(&defs[key], &mut kinds);
        }
        assert_eq!(kinds.len(), NAMED_MODELS.len(), "{kinds:?}");
        let names = NamedModel::names();
        for k in &kinds {
            assert!(names.contains(&k.replace('_', "-")), "model kind {k} has no name");
        }
        for m in NAMED_MODELS {
            assert_eq!(NamedModel::parse(&m.name()), Ok(*m));
        }
        assert!(matches!(NamedModel::parse("lies"), Err(ModelError::Unknown { .. })));
    }

    fn collect_kinds(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(k) = o.get("properties").and_then(|p| p.get("kind")) {
                    for c in [k.get("const"), k.get("enum").and_then(|e| e.get(0))].into_iter().flatten() {
                        if let Some(s) = c.as_str() {
                            out.push(s.to_string());
                        }
                    }
                }
                o.values().for_each(|x| collect_kinds(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_kinds(x, out)),
            _ => {}
        }
    }
}
