//! The power-switch interface: whatever cuts and restores the drive's power.
//!
//! Capabilities are declared up front so a scenario can be refused before a run starts,
//! never discovered by failing at 3 am. A switch that cannot read its state back says so
//! (`PowerCaps::state_readback == false`); the caller must then confirm a cut another way
//! (the device disappearing), because a cut that did not happen must never pass as one.

use std::fmt;
use std::time::Duration;

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
    /// The switch acknowledges each command (a reply, an exit status). A switch that does not
    /// (CH340 "LCUS" relays) cannot even tell that a command arrived.
    pub acknowledges: bool,
    /// It times a glitch itself ([`PowerShape::Glitch`]: a Quarch hot-plug module).
    pub glitch_engine: bool,
    /// It sets its rails' voltage ([`PowerShape::Sag`], [`PowerShape::Ramp`]: a Quarch power
    /// module).
    pub programmable_rails: bool,
}

impl PowerCaps {
    /// Whether the switch can make `shape`.
    pub fn makes(&self, shape: &PowerShape) -> bool {
        match shape {
            PowerShape::Glitch { .. } => self.glitch_engine,
            PowerShape::Sag { .. } | PowerShape::Ramp { .. } => self.programmable_rails,
        }
    }

    /// True when the switch itself can confirm that a cut happened (state or voltage readback).
    /// When false, the caller must confirm the cut by the device disappearing.
    pub fn confirms_cut(&self) -> bool {
        self.state_readback || self.voltage_readback
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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
    /// What the switch says it is (model, serial, firmware), for logs and bring-up. Switches
    /// that cannot say anything answer with their name.
    fn identify(&mut self) -> Result<String, PowerError> {
        Ok(self.name())
    }
    /// Takes the transcript of what the switch exchanged since the last call (commands run and
    /// their output, for the run log). Switches with nothing worth logging return nothing.
    fn take_log(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Pin-mate sequencing for the next cuts and power-ons: the drive's connector pins mate
    /// (and break) in timed groups `step_ms` apart, as a slow or fast hand would plug it.
    /// Only hot-plug fixtures have it; the others answer `Unsupported`.
    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), PowerError> {
        Err(PowerError::Unsupported { switch: self.name(), what: format!("sequence pin mating ({step_ms} ms steps)") })
    }
    /// A shape of the drive's supply other than off and on (a glitch, a sag, a ramp down),
    /// timed or stepped by the fixture; returns once it is over and the supply is back at
    /// its setting. Only Quarch modules have them (a hot-plug module's glitch engine, a power
    /// module's programmable rails); the others answer `Unsupported`.
    fn shape(&mut self, shape: &PowerShape) -> Result<(), PowerError> {
        Err(PowerError::Unsupported { switch: self.name(), what: format!("{shape} (a relay can cut the power, not shape it)") })
    }
}

/// A shape of the drive's supply a fixture makes by itself, beyond off and on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerShape {
    /// The power of `signals` (the fixture's names for the drive's rails) goes for `length`
    /// and comes back: a hot-plug module's glitch engine times it.
    Glitch { signals: Vec<String>, length: Duration },
    /// The rail `rail` (`12V`, `5V`, `3V3`) drops to `to_mv` for `length`, then returns to its
    /// setting: a power module's programmable output, stepped by the host.
    Sag { rail: String, to_mv: u32, length: Duration },
    /// The rail `rail` falls from its setting to `to_mv` over `over`, stays there for `hold`,
    /// then returns to its setting: a power module's output, stepped by the host.
    Ramp { rail: String, to_mv: u32, over: Duration, hold: Duration },
}

impl fmt::Display for PowerShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerShape::Glitch { signals, length } => write!(f, "glitch {} for {length:?}", signals.join("+")),
            PowerShape::Sag { rail, to_mv, length } => write!(f, "sag the {rail} rail to {to_mv} mV for {length:?}"),
            PowerShape::Ramp { rail, to_mv, over, hold } => {
                write!(f, "ramp the {rail} rail down to {to_mv} mV over {over:?}, held {hold:?}")
            }
        }
    }
}

impl<T: PowerSwitch + ?Sized> PowerSwitch for Box<T> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn capabilities(&self) -> PowerCaps {
        (**self).capabilities()
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        (**self).power_off()
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        (**self).power_on()
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        (**self).state()
    }
    fn identify(&mut self) -> Result<String, PowerError> {
        (**self).identify()
    }
    fn take_log(&mut self) -> Vec<String> {
        (**self).take_log()
    }
    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), PowerError> {
        (**self).set_mate_step(step_ms)
    }
    fn shape(&mut self, shape: &PowerShape) -> Result<(), PowerError> {
        (**self).shape(shape)
    }
}
