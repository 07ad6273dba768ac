//! Argument types shared by several commands.

use clap::ValueEnum;
use faultline::scenario::{DualSimModel, Scenario, SimModel};
use faultline_drivers::blockdev::Expectation;

#[derive(Clone, Copy, ValueEnum)]
pub enum PatternArg {
    Seq,
    Random,
    Hotcold,
}

#[derive(clap::Args, Clone, Default)]
pub struct DeviceArgs {
    /// Refuse the device unless its serial number (sysfs device/serial) is exactly this.
    #[arg(long)]
    expect_serial: Option<String>,
    /// Refuse the device unless its WWID/EUI/NGUID (sysfs wwid) is exactly this.
    #[arg(long)]
    expect_wwid: Option<String>,
    /// Refuse the device unless its model (sysfs device/model) is exactly this.
    #[arg(long)]
    expect_model: Option<String>,
    /// Refuse the target unless its capacity is exactly this many bytes.
    #[arg(long)]
    expect_size: Option<u64>,
}

impl DeviceArgs {
    pub fn expectation(&self) -> Expectation {
        Expectation {
            serial: self.expect_serial.clone(),
            wwid: self.expect_wwid.clone(),
            model: self.expect_model.clone(),
            size_bytes: self.expect_size,
            backing_file: None,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModelArg {
    HonestPlp,
    HonestVolatile,
    LiesAboutFlush,
    TornWrites,
    Misdirects,
    BitRot,
    Rollback,
    ReadErrors,
    ReadHangs,
    DiesAfterCuts,
    Resurrect,
    /// Dual-port drive, both ports honest.
    DualHonest,
    /// Dual-port drive: pulling or resetting one port stalls the other for 800 ms.
    DualFreezeOnPull,
    /// Dual-port drive: a pulled port's in-flight writes land 20,000 writes later, over newer data.
    DualGhostWrites,
    /// Dual-port drive: after a fault, the other port serves stale copies for 5 s.
    DualStalePort,
    /// Dual-port drive: resetting or pulling one port drops the shared volatile cache.
    DualDropCacheOnReset,
    /// Dual-port drive: a power cut loses the shared volatile cache it claims is protected.
    DualLoseCacheAtCut,
}

impl ModelArg {
    /// The dual-port model this names, if it names one.
    pub fn dual_model(self) -> Option<DualSimModel> {
        Some(match self {
            ModelArg::DualHonest => DualSimModel::DualHonest,
            ModelArg::DualFreezeOnPull => DualSimModel::DualFreezeOnPull { stall_ms: 800 },
            ModelArg::DualGhostWrites => DualSimModel::DualGhostWrites { after_writes: 20000 },
            ModelArg::DualStalePort => DualSimModel::DualStalePort { for_ms: 5000 },
            ModelArg::DualDropCacheOnReset => DualSimModel::DualDropCacheOnReset,
            ModelArg::DualLoseCacheAtCut => DualSimModel::DualLoseCacheAtCut,
            _ => return None,
        })
    }

    /// Sets the simulated drive's model in `s`: a dual-port model on a dual-port drive, a
    /// single-port one (what a power cut does) on either.
    pub fn apply(self, s: &mut Scenario) -> Result<(), String> {
        let sim = s.target.sim.as_mut().ok_or("--model: the scenario's target is not the simulated drive")?;
        match (self.dual_model(), sim.dual.as_mut()) {
            (Some(m), Some(d)) => d.model = m,
            (Some(_), None) => return Err("--model dual-*: the scenario's simulated drive is single-port (target.sim.dual)".into()),
            (None, _) => sim.model = self.sim_model(),
        }
        Ok(())
    }

    /// The simulated drive's model this names, with the demo's parameters.
    pub fn sim_model(self) -> SimModel {
        match self {
            ModelArg::HonestPlp => SimModel::HonestPlp,
            ModelArg::HonestVolatile => SimModel::HonestVolatile,
            ModelArg::LiesAboutFlush => SimModel::LiesAboutFlush,
            ModelArg::TornWrites => SimModel::TornWrites,
            ModelArg::Misdirects => SimModel::Misdirects { per_mille: 2 },
            ModelArg::BitRot => SimModel::BitRot { flips_per_cut: 1 },
            ModelArg::Rollback => SimModel::Rollback { writes_per_cut: 1 },
            ModelArg::ReadErrors => SimModel::ReadErrors { sectors_per_cut: 1 },
            ModelArg::ReadHangs => SimModel::ReadHangs { sectors_per_cut: 1 },
            ModelArg::DiesAfterCuts => SimModel::DiesAfterCuts { cuts: 50 },
            ModelArg::Resurrect => SimModel::Resurrect { after_cuts: 1 },
            // A dual-port model keeps the drive honest at power cuts.
            _ => SimModel::HonestPlp,
        }
    }
}
