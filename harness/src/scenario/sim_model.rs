//! The simulated drive's fault model as a scenario names it (`target.sim.model`): what each
//! does, its spelling, its parameters checked.

use faultline_fixtures::FaultModel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The simulated drive's fault model; maps one to one onto `faultline_fixtures::FaultModel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SimModel {
    /// Power-loss protected and honest: completed writes survive every cut.
    HonestPlp,
    /// Volatile cache, honest about flushes: each cached piece is kept or lost at a cut.
    HonestVolatile,
    /// Volatile cache whose flushes do nothing: a cut loses every completed non-FUA write.
    LiesAboutFlush,
    /// PLP drive that breaks atomic units of writes in flight at a cut.
    TornWrites,
    /// PLP drive that writes `per_mille` of its writes at a wrong address.
    Misdirects { per_mille: u32 },
    /// PLP drive that flips one bit in each of `flips_per_cut` sectors at each power-on.
    BitRot { flips_per_cut: u32 },
    /// PLP drive that reverts up to `writes_per_cut` recent writes at each power-on.
    Rollback { writes_per_cut: u32 },
    /// PLP drive that makes `sectors_per_cut` sectors unreadable (EIO) at each power-on.
    ReadErrors { sectors_per_cut: u32 },
    /// As `read_errors`, with reads that hang (ETIMEDOUT).
    ReadHangs { sectors_per_cut: u32 },
    /// Honest PLP drive that never comes back after its `cuts`-th cut.
    DiesAfterCuts { cuts: u32 },
    /// PLP drive whose FTL journal brings back, `after_cuts` cuts later, the old content of
    /// every sector a write in flight at a cut landed on (a stale version once seen).
    Resurrect { after_cuts: u32 },
    /// PLP drive whose journal replay after power-on (until the first write, at most
    /// `replay_ms`) is not idempotent: a cut during it corrupts `sectors_per_cut` sectors of
    /// the writes replayed (found by a fault's `recovery` cuts).
    ReplayCorrupts { replay_ms: u32, sectors_per_cut: u32 },
    /// PLP drive whose capacitors take `recharge_ms` after power-on to recharge: a cut before
    /// then loses its cache, the power-fail dump restored at power-on included (under the
    /// flush contract: versions the host saw after that power-on).
    PlpRecharge { recharge_ms: u32 },
    /// PLP drive whose power-fail detector trips below `detect_mv`, under its electronics'
    /// brown-out at 10000 mV: a sag or a ramp into the band between lands the writes in flight
    /// with a bit flipped, and nothing is reported (found by `power_sag`, `power_ramp` and a
    /// glitch longer than the 200 µs hold-up).
    PfailMissesSag { detect_mv: u32 },
    /// PLP drive that, at each cut, undoes up to `per_cut` of its most recent durable
    /// deallocates: their sectors read the data from before them again (a resurrection). Needs
    /// a workload with deallocates, and `dealloc_reads` zeros or ones.
    LosesDeallocate { per_cut: u32 },
    /// PLP drive that applies every deallocate `shift_sectors` further on than asked: the
    /// sectors named keep their data, the next ones lose theirs.
    DeallocatesWrongRange { shift_sectors: u32 },
    /// PLP drive that, at a cut, keeps only the first atomic unit of each durable Write Zeroes
    /// of the cycle that spans several.
    TearsWriteZeroes,
    /// Volatile drive that completes a format with its zeros still in the cache: a cut before
    /// a flush brings the old data back. Needs cuts during formats (`[cut] kind = "during_format"`).
    CachesFormat,
    /// PLP drive that, after a cut with a format in flight, fails every read and write (Format
    /// In Progress) until a format completes: honest, and the run formats again.
    FormatStaysInProgress,
}

impl SimModel {
    pub fn fault_model(self) -> FaultModel {
        match self {
            SimModel::HonestPlp => FaultModel::HonestPlp,
            SimModel::HonestVolatile => FaultModel::HonestVolatile,
            SimModel::LiesAboutFlush => FaultModel::LiesAboutFlush,
            SimModel::TornWrites => FaultModel::TornWrites,
            SimModel::Misdirects { per_mille } => FaultModel::Misdirects { per_mille },
            SimModel::BitRot { flips_per_cut } => FaultModel::BitRot { flips_per_cut },
            SimModel::Rollback { writes_per_cut } => FaultModel::Rollback { writes_per_cut },
            SimModel::ReadErrors { sectors_per_cut } => FaultModel::ReadErrors { sectors_per_cut },
            SimModel::ReadHangs { sectors_per_cut } => FaultModel::ReadHangs { sectors_per_cut },
            SimModel::DiesAfterCuts { cuts } => FaultModel::DiesAfterCuts(cuts),
            SimModel::Resurrect { after_cuts } => FaultModel::Resurrect { after_cuts },
            SimModel::ReplayCorrupts { replay_ms, sectors_per_cut } => FaultModel::ReplayCorrupts { replay_ms, sectors_per_cut },
            SimModel::PlpRecharge { recharge_ms } => FaultModel::PlpRecharge { recharge_ms },
            SimModel::PfailMissesSag { detect_mv } => FaultModel::PfailMissesSag { detect_mv },
            SimModel::LosesDeallocate { per_cut } => FaultModel::LosesDeallocate { per_cut },
            SimModel::DeallocatesWrongRange { shift_sectors } => FaultModel::DeallocatesWrongRange { shift_sectors },
            SimModel::TearsWriteZeroes => FaultModel::TearsWriteZeroes,
            SimModel::CachesFormat => FaultModel::CachesFormat,
            SimModel::FormatStaysInProgress => FaultModel::FormatStaysInProgress,
        }
    }
}

impl std::fmt::Display for SimModel {
    /// The scenario file's spelling: `rollback (writes_per_cut = 1)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, params): (&str, &[(&str, u32)]) = match *self {
            SimModel::HonestPlp => ("honest_plp", &[]),
            SimModel::HonestVolatile => ("honest_volatile", &[]),
            SimModel::LiesAboutFlush => ("lies_about_flush", &[]),
            SimModel::TornWrites => ("torn_writes", &[]),
            SimModel::Misdirects { per_mille } => ("misdirects", &[("per_mille", per_mille)]),
            SimModel::BitRot { flips_per_cut } => ("bit_rot", &[("flips_per_cut", flips_per_cut)]),
            SimModel::Rollback { writes_per_cut } => ("rollback", &[("writes_per_cut", writes_per_cut)]),
            SimModel::ReadErrors { sectors_per_cut } => ("read_errors", &[("sectors_per_cut", sectors_per_cut)]),
            SimModel::ReadHangs { sectors_per_cut } => ("read_hangs", &[("sectors_per_cut", sectors_per_cut)]),
            SimModel::DiesAfterCuts { cuts } => ("dies_after_cuts", &[("cuts", cuts)]),
            SimModel::Resurrect { after_cuts } => ("resurrect", &[("after_cuts", after_cuts)]),
            SimModel::ReplayCorrupts { replay_ms, sectors_per_cut } => {
                ("replay_corrupts", &[("replay_ms", replay_ms), ("sectors_per_cut", sectors_per_cut)])
            }
            SimModel::PlpRecharge { recharge_ms } => ("plp_recharge", &[("recharge_ms", recharge_ms)]),
            SimModel::PfailMissesSag { detect_mv } => ("pfail_misses_sag", &[("detect_mv", detect_mv)]),
            SimModel::LosesDeallocate { per_cut } => ("loses_deallocate", &[("per_cut", per_cut)]),
            SimModel::DeallocatesWrongRange { shift_sectors } => ("deallocates_wrong_range", &[("shift_sectors", shift_sectors)]),
            SimModel::TearsWriteZeroes => ("tears_write_zeroes", &[]),
            SimModel::CachesFormat => ("caches_format", &[]),
            SimModel::FormatStaysInProgress => ("format_stays_in_progress", &[]),
        };
        f.write_str(name)?;
        if !params.is_empty() {
            let list: Vec<String> = params.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            write!(f, " ({})", list.join(", "))?;
        }
        Ok(())
    }
}

impl SimModel {
    /// The models that act on deallocates and Write Zeroes: their parameters, and what they need
    /// of the drive.
    pub(super) fn zeroing_fault(self, sim: &super::SimTarget) -> Option<(&'static str, String)> {
        let sectors = sim.capacity_bytes / sim.sector_bytes.max(1) as u64;
        match self {
            SimModel::LosesDeallocate { per_cut: 0 } => Some(("target.sim.model.per_cut", "0: expected at least 1".into())),
            SimModel::LosesDeallocate { .. } if sim.dealloc_reads == crate::ledger::DeallocRead::Unreported => Some((
                "target.sim.dealloc_reads",
                "unreported: loses_deallocate needs zeros or ones (where the data last written may stay, an undone deallocate is no fault)"
                    .into(),
            )),
            SimModel::DeallocatesWrongRange { shift_sectors } if shift_sectors == 0 || shift_sectors as u64 >= sectors => Some((
                "target.sim.model.shift_sectors",
                format!("{shift_sectors}: expected 1 to {}, the drive's sectors less one", sectors.saturating_sub(1)),
            )),
            _ => None,
        }
    }
}
