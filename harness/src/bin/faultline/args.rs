//! Argument types shared by several commands.

use clap::ValueEnum;
use faultline::scenario::SimModel;
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
}

impl ModelArg {
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
        }
    }
}
