//! Shapes of the drive's supply a Quarch module makes beyond off and on: a hot-plug module's
//! glitch (its glitch engine times it), and a power module's sag and ramp down (its
//! programmable rail, stepped by the host).
//!
//! Commands: the glitch as Quarch AN-002 and AN-011 give it (`SIGnal:NAME:GLITch:ENAble ON`,
//! `GLITch:SETup BASE COUNT`, `RUN:GLITch ONCE`); a power module's rail set with
//! `SIGnal:12V:VOLTage <mV>` and read back with `SIGnal:12V:VOLTage?`, as quarchpy's own power
//! margining test and module self-tests drive it (`sig:12v:volt 11800`). The rail's limits
//! are the programmable power module's (12 V: 0 to 14400 mV, 5 V: 0 to 6000, 3V3: 0 to 3960).
//! The module's pattern generator could time a ramp on the module itself; its command set is
//! not in Quarch's public material, so a ramp is stepped from the host, each step a command
//! and its round trip (a few ms on serial): `ramp_steps` says how many.

use super::{Conn, ModuleKind, Quarch};
use crate::power::{PowerError, PowerShape};
use std::time::{Duration, Instant};

/// The longest a ramp's step waits for the next: a ramp is at least this fine.
const RAMP_STEP: Duration = Duration::from_millis(10);
/// The most steps a ramp takes (a serial round trip each).
const RAMP_STEPS_MAX: u32 = 100;

impl Quarch {
    /// The shape, made by the module: a glitch on a hot-plug module, a sag or a ramp on a
    /// power module; returns once it is over and the rail back at its setting.
    pub fn shape(&self, shape: &PowerShape) -> Result<(), PowerError> {
        match shape {
            PowerShape::Glitch { signals, length } => self.glitch(signals, *length),
            PowerShape::Sag { rail, to_mv, length } => {
                let mut c = self.lock();
                let setting = c.rail_setting(rail, *to_mv, "sag")?;
                c.shaped(rail, setting, |c| {
                    c.set_rail(rail, *to_mv)?;
                    std::thread::sleep(*length);
                    Ok(())
                })
            }
            PowerShape::Ramp { rail, to_mv, over, hold } => {
                let mut c = self.lock();
                let setting = c.rail_setting(rail, *to_mv, "ramp")?;
                let steps = ramp_steps(*over);
                c.shaped(rail, setting, |c| {
                    let start = Instant::now();
                    for k in 1..=steps {
                        let mv = setting as i64 + (*to_mv as i64 - setting as i64) * k as i64 / steps as i64;
                        c.set_rail(rail, mv as u32)?;
                        std::thread::sleep((*over * k / steps).saturating_sub(start.elapsed()));
                    }
                    std::thread::sleep(*hold);
                    Ok(())
                })
            }
        }
    }

    /// Hot-plug modules: a glitch of `signals` for `length` (each signal enabled with
    /// `SIGnal:NAME:GLITch:ENAble ON`, the length set up as a time base times a count with
    /// `GLITch:SETup BASE COUNT`, fired with `RUN:GLITch ONCE`). The module's glitch engine
    /// times it: 50 ns to 127.5 s, in the steps [`glitch_setup`] gives.
    pub fn glitch(&self, signals: &[String], length: Duration) -> Result<(), PowerError> {
        let mut c = self.lock();
        c.require_hotplug("glitch")?;
        let (base, count) = glitch_setup(length).ok_or_else(|| {
            c.err("GLITch:SETup", format!("a glitch of {length:?}: the glitch engine makes 50 ns to 127.5 s (a time base times 0 to 255)"))
        })?;
        for s in signals {
            c.command_ok(&format!("SIGnal:{s}:GLITch:ENAble ON"))?;
        }
        c.command_ok(&format!("GLITch:SETup {base} {count}"))?;
        c.command_ok("RUN:GLITch ONCE")
    }
}

impl Conn {
    /// A power module's setting of `rail` (to return to after a `what` to `to_mv`), read back
    /// once the module and the voltage are known to fit.
    fn rail_setting(&mut self, rail: &str, to_mv: u32, what: &str) -> Result<u32, PowerError> {
        if self.kind != ModuleKind::Power {
            return Err(PowerError::Unsupported {
                switch: self.name.clone(),
                what: format!("{what} a rail (it is a hot-plug module: only a power module sets its rails' voltage)"),
            });
        }
        self.check_rail(rail, to_mv)?;
        let cmd = format!("SIGnal:{rail}:VOLTage?");
        let r = self.command(&cmd)?;
        match parse_millivolts(&r) {
            Some(mv) if rail_limit_mv(rail).is_some_and(|max| mv <= max) => Ok(mv),
            _ => Err(self.err(&cmd, format!("expected the rail's setting in mV (such as 12000mV), module answered {r:?}"))),
        }
    }

    fn check_rail(&self, rail: &str, mv: u32) -> Result<(), PowerError> {
        match rail_limit_mv(rail) {
            Some(max) if mv <= max => Ok(()),
            Some(max) => Err(self.err(&format!("SIGnal:{rail}:VOLTage {mv}"), format!("{mv} mV: the {rail} rail takes 0 to {max} mV"))),
            None => Err(self.err(&format!("SIGnal:{rail}:VOLTage"), format!("{rail:?}: a power module's rails are 12V, 5V and 3V3"))),
        }
    }

    /// Runs `shape` on the rail, then puts it back to `setting`, even when the shape failed
    /// part-way (a rail left sagged would brown the next cycles out); the first error wins.
    fn shaped(&mut self, rail: &str, setting: u32, shape: impl FnOnce(&mut Conn) -> Result<(), PowerError>) -> Result<(), PowerError> {
        let made = shape(self);
        let back = self.set_rail(rail, setting);
        made.and(back)
    }

    fn set_rail(&mut self, rail: &str, mv: u32) -> Result<(), PowerError> {
        self.command_ok(&format!("SIGnal:{rail}:VOLTage {mv}"))
    }
}

/// A reply such as `12000mV`, `12000 mV`, `12.0V` or `12000`, in millivolts.
pub(super) fn parse_millivolts(reply: &str) -> Option<u32> {
    let t = reply.trim();
    let (num, scale) = match (t.strip_suffix("mV").or_else(|| t.strip_suffix("MV")), t.strip_suffix(['V', 'v'])) {
        (Some(n), _) => (n, 1.0),
        (None, Some(n)) => (n, 1000.0),
        (None, None) => (t, 1.0),
    };
    let v = num.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0 && *v < 100_000.0)?;
    Some((v * scale).round() as u32)
}

/// The highest setting of a power module's rail, mV (`None`: not one of its rails).
pub fn rail_limit_mv(rail: &str) -> Option<u32> {
    match rail.to_ascii_uppercase().as_str() {
        "12V" => Some(14_400),
        "5V" => Some(6_000),
        "3V3" => Some(3_960),
        _ => None,
    }
}

/// How many steps a ramp over `over` takes: one per [`RAMP_STEP`], at least 1, at most
/// [`RAMP_STEPS_MAX`].
pub fn ramp_steps(over: Duration) -> u32 {
    let n = over.as_nanos().div_ceil(RAMP_STEP.as_nanos());
    u32::try_from(n).unwrap_or(u32::MAX).clamp(1, RAMP_STEPS_MAX)
}

/// The glitch engine's setup for `length`: the finest of its time bases (50 ns to 500 ms, in
/// decades: 50, 500, 5 and 50 of each unit) whose count, at most 255, reaches it, the count
/// rounded to the nearest; `None` outside 50 ns to 127.5 s.
pub fn glitch_setup(length: Duration) -> Option<(&'static str, u32)> {
    const BASES: [(&str, u64); 8] = [
        ("50ns", 50),
        ("500ns", 500),
        ("5us", 5_000),
        ("50us", 50_000),
        ("500us", 500_000),
        ("5ms", 5_000_000),
        ("50ms", 50_000_000),
        ("500ms", 500_000_000),
    ];
    let ns = u64::try_from(length.as_nanos()).ok()?;
    if !(50..=255 * 500_000_000).contains(&ns) {
        return None;
    }
    BASES.iter().find(|(_, b)| ns.div_ceil(*b) <= 255).map(|(name, b)| (*name, u32::try_from((ns + b / 2) / b).unwrap_or(255).max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glitch_length_is_the_finest_time_base_times_a_count_to_255() {
        let us = Duration::from_micros;
        assert_eq!(glitch_setup(Duration::from_nanos(100)), Some(("50ns", 2)));
        assert_eq!(glitch_setup(us(1)), Some(("50ns", 20)));
        assert_eq!(glitch_setup(us(100)), Some(("500ns", 200)));
        assert_eq!(glitch_setup(Duration::from_millis(1)), Some(("5us", 200)));
        assert_eq!(glitch_setup(Duration::from_millis(100)), Some(("500us", 200)));
        assert_eq!(glitch_setup(Duration::from_millis(127_500)), Some(("500ms", 255)));
        // Rounded to the nearest step of the finest base that reaches it.
        assert_eq!(glitch_setup(us(1001)), Some(("5us", 200)));
        assert_eq!(glitch_setup(Duration::from_nanos(49)), None);
        assert_eq!(glitch_setup(Duration::from_millis(127_501)), None);
    }

    #[test]
    fn a_rail_setting_reads_in_millivolts_or_volts_and_a_ramp_steps_every_10_ms_up_to_100() {
        assert_eq!(parse_millivolts("12000mV"), Some(12_000));
        assert_eq!(parse_millivolts(" 11800 mV "), Some(11_800));
        assert_eq!(parse_millivolts("12.5V"), Some(12_500));
        assert_eq!(parse_millivolts("3300"), Some(3_300));
        assert_eq!(parse_millivolts("-5mV"), None);
        assert_eq!(parse_millivolts("PLUGGED"), None);
        assert_eq!(parse_millivolts("1e300"), None);
        assert_eq!((rail_limit_mv("12v"), rail_limit_mv("3V3"), rail_limit_mv("24V")), (Some(14_400), Some(3_960), None));
        assert_eq!(ramp_steps(Duration::ZERO), 1);
        assert_eq!(ramp_steps(Duration::from_millis(5)), 1);
        assert_eq!(ramp_steps(Duration::from_millis(50)), 5);
        assert_eq!(ramp_steps(Duration::from_secs(60)), 100);
    }
}
