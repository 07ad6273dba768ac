//! The power-switch interface: whatever cuts and restores the drive's power.
//!
//! Capabilities are declared up front so a scenario can be refused before a run starts,
//! never discovered by failing at 3 am. A switch that cannot read its state back says so
//! (`PowerCaps::state_readback == false`); the caller must then confirm a cut another way
//! (the device disappearing), because a cut that did not happen must never pass as one.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    On,
    Off,
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PowerState::On => "on",
            PowerState::Off => "off",
        })
    }
}

/// What a switch can do besides on and off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerCaps {
    /// The switch reports its output state.
    pub state_readback: bool,
    /// The switch measures output voltage (a cut can be confirmed electrically).
    pub voltage_readback: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error("power switch {switch}: {command}: {reason}")]
    Failed { switch: String, command: String, reason: String },
    #[error("power switch {switch} cannot {what}")]
    Unsupported { switch: String, what: String },
}

/// Cuts and restores a drive's power.
pub trait PowerSwitch {
    /// The spec or name the user gave this switch.
    fn name(&self) -> String;
    fn capabilities(&self) -> PowerCaps;
    fn power_off(&mut self) -> Result<(), PowerError>;
    fn power_on(&mut self) -> Result<(), PowerError>;
    /// Output state; `PowerError::Unsupported` where `capabilities().state_readback` is false.
    fn state(&mut self) -> Result<PowerState, PowerError>;
}
