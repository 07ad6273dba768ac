//! Argument types shared by several commands.

use clap::ValueEnum;
use faultline::scenario::{NamedModel, NAMED_MODELS};
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

/// `--model`, `--sim`: a model of the simulated drive by its name, parsed into the scenario's
/// own model types ([`NamedModel`]); `--help` lists every name with what it does.
#[derive(Clone, Copy)]
pub struct ModelParser;

impl clap::builder::TypedValueParser for ModelParser {
    type Value = NamedModel;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<NamedModel, clap::Error> {
        // clap's own refusal of a value that is none of the possible ones, listing them.
        let name = clap::builder::PossibleValuesParser::new(NamedModel::names()).parse_ref(cmd, arg, value)?;
        NamedModel::parse(&name).map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(NAMED_MODELS.iter().map(|m| clap::builder::PossibleValue::new(m.name()).help(m.help()))))
    }
}
