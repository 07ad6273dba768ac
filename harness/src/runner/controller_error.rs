//! Why a fault's controller failed: a power switch or link controller failed a command or
//! could not be opened (the drivers' own errors, kept as the source), the run has no
//! controller for the fault, a cut was not confirmed, or an agent's reset of its own host
//! failed (its report's text, as it came over the wire).
//!
//! Each message says what it is about in full, its source's text included (the binary prints
//! a cause once however many errors carry it).

use super::shared::Shared;
use crate::scenario::SimSwitch;
use faultline_drivers::control::{OpenError, SpecError};
use faultline_drivers::{LinkError, PowerError, ResetKind};

/// A power switch or link controller failed a command, could not be opened, or did not
/// confirm a cut: a controller failure for the stop policy.
///
/// Cloned: every writer a cut hits learns the one cut's result.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ControllerError {
    /// A power switch failed a command (off, on, state, pin-mate step).
    #[error("{0}")]
    Power(#[from] PowerError),
    /// A link controller failed a reset, or cannot do one the run asks of it.
    #[error("{0}")]
    Link(#[from] LinkError),
    /// A controller could not be opened.
    #[error("{0}")]
    Open(#[from] OpenError),
    /// A controller spec did not parse (the simulated drive's emulated switches).
    #[error("{0}")]
    Spec(#[from] SpecError),
    /// A protocol emulator of the simulated drive's switch could not be started.
    #[error("cannot start the {switch} emulator: {source}")]
    Emulator { switch: SimSwitch, source: Shared<std::io::Error> },
    /// A cut that needs a controller the run does not have, or that names no port to aim at.
    #[error(transparent)]
    Missing(#[from] Missing),
    /// The switch read back `on` after the cut.
    #[error("power switch {switch} still reports power on after the cut: the cut did not happen")]
    StillOn { switch: String },
    /// A host's switch read back `on` after its cut.
    #[error("{switch} still reports the host on after the cut: the cut did not happen")]
    HostStillOn { switch: String },
    /// The switch's state could not be read back after the cut.
    #[error("cannot read the switch state back after the cut: {0}")]
    Readback(#[source] PowerError),
    /// The switch cannot read its state back, and the device went on answering.
    #[error(
        "the switch cannot read its state back and the device kept answering for {grace_ms} ms after the cut: the cut is not \
         confirmed"
    )]
    Unconfirmed { grace_ms: u128 },
    /// The fault's thread ended before it cut.
    #[error("the fault thread ended before it cut")]
    ThreadGone,
    /// An agent's reset of its own host failed: the host, the reset, the controller the
    /// agent reset, and the agent's reason (text: it comes over the wire).
    #[error("{host}: {} of {controller}: {message}", reset_name(.reset))]
    Remote { host: String, reset: Option<ResetKind>, controller: String, message: String },
    /// A normal shutdown's host side failed: what it shut down, and why.
    #[error("the normal shutdown of {what}: {source}")]
    Shutdown {
        what: String,
        #[source]
        source: crate::runner::shutdown::ShutdownError,
    },
    /// A target whose controllers a normal shutdown cannot reach from this host.
    #[error("the normal shutdown of {target}: {why}")]
    NotShutdownable { target: String, why: &'static str },
    /// An agent sent no report of the reset aimed at it.
    #[error(
        "{host}: its agent did not report its {} (its cycle ended before the reset, or the host was lost)",
        reset_name(.reset)
    )]
    NoReport { host: String, reset: Option<ResetKind> },
}

fn reset_name(reset: &Option<ResetKind>) -> String {
    reset.map_or_else(|| "reset".into(), |k| k.to_string())
}

/// What a cut needs that the run does not have (a plan the run was opened with refuses most
/// of these first).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("controllers.power: the fault needs a power switch, and the run has none")]
    PowerSwitch,
    #[error("controllers.power: {switch} cannot {shape} (a Quarch hot-plug module glitches, a Quarch power module sets its rails; a relay only switches)")]
    CannotShape { switch: String, shape: String },
    #[error("a normal shutdown needs the drive's controllers (the simulated drive's, or an NVMe namespace's), and the run has none")]
    ControllerShutdown,
    #[error("controllers.link: the run has no link controller")]
    LinkController,
    #[error("no host power switch (the ports' host_power)")]
    HostPower,
    #[error("port {port}: no host power switch (its host_power)")]
    PortHostPower { port: String },
    #[error("port {port}: its host's power switch is not open")]
    HostPowerNotOpen { port: String },
    /// A cut aimed at a port's host (`what`: which) was aimed with no port.
    #[error("{what} is aimed at a port's host, and no port was named")]
    Port { what: &'static str },
    #[error("{0}: not a reset a host runs on itself")]
    NotAHostReset(ResetKind),
    #[error("port {port}: no agent on its host to run {kind}")]
    Agent { port: String, kind: ResetKind },
    /// A link controller of several ports, and the fault names none.
    #[error("fault.port: {controller} has ports [{}]: name one", .ports.join(", "))]
    WhichPort { controller: String, ports: Vec<String> },
    #[error("the fault's controller is not open")]
    NotOpen,
    #[error("{0} is a link controller: no pin-mate sequencing")]
    LinkMateStep(String),
    #[error("no power switch: no pin-mate sequencing")]
    MateStep,
    /// A simulated drive's switch spec opened without a power switch.
    #[error("{0} opened without a power switch")]
    SimPower(String),
    #[error("controllers.power: a real target needs a real power switch")]
    RealPower,
    #[error("controllers.power: the controller has no power switch")]
    PowerRole,
    #[error("controllers.link: the controller cannot reset links")]
    LinkRole,
    #[error("the simulated drive's power is switched through its own switch (controllers.power = \"sim\")")]
    SimSwitch,
}

/// What the writer calls at the cut placement: the cycle's fault, fired.
pub type FaultHook<'a> = dyn FnMut() -> Result<(), ControllerError> + 'a;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_switch_failure_keeps_the_drivers_error_as_its_source_and_its_text() {
        let p =
            PowerError::Failed { switch: "lcus+serial:///dev/ttyUSB0?channel=1".into(), command: "off".into(), reason: "no ack".into() };
        let e = ControllerError::from(p.clone());
        assert_eq!(e.to_string(), p.to_string(), "the message users see is the switch's own");
        let src = e.source().and_then(|s| s.downcast_ref::<PowerError>()).expect("the source is the PowerError");
        assert_eq!(src, &p);

        let l = LinkError::Unsupported {
            controller: "exec-link:".into(),
            port: "A".into(),
            kind: ResetKind::Perst,
            supported: "port-pull".into(),
        };
        let e = ControllerError::from(l.clone());
        assert_eq!(e.source().and_then(|s| s.downcast_ref::<LinkError>()), Some(&l));

        let r = ControllerError::Readback(p.clone());
        assert_eq!(r.to_string(), format!("cannot read the switch state back after the cut: {p}"));
        assert_eq!(r.source().and_then(|s| s.downcast_ref::<PowerError>()), Some(&p));
    }

    /// A switch whose every command fails, as a relay that stopped answering does.
    struct Dead;

    impl faultline_drivers::PowerSwitch for Dead {
        fn name(&self) -> String {
            "dead relay".into()
        }
        fn capabilities(&self) -> faultline_drivers::PowerCaps {
            faultline_drivers::PowerCaps { state_readback: true, ..Default::default() }
        }
        fn power_off(&mut self) -> Result<(), PowerError> {
            Err(PowerError::Failed { switch: self.name(), command: "off".into(), reason: "no answer within 1 s".into() })
        }
        fn power_on(&mut self) -> Result<(), PowerError> {
            Err(PowerError::Failed { switch: self.name(), command: "on".into(), reason: "no answer within 1 s".into() })
        }
        fn state(&mut self) -> Result<faultline_drivers::PowerState, PowerError> {
            Err(PowerError::Unsupported { switch: self.name(), what: "read its state".into() })
        }
    }

    #[test]
    fn the_cutter_hands_on_the_switchs_own_error() {
        let mut cutter = super::super::fault::Cutter::power(Box::new(Dead));
        let e = cutter.cut(std::time::Duration::ZERO).unwrap_err();
        assert!(matches!(&e, ControllerError::Power(PowerError::Failed { command, .. }) if command == "off"), "{e:?}");
        assert!(e.source().is_some_and(|s| s.is::<PowerError>()));
        assert_eq!(e.to_string(), "power switch dead relay: off: no answer within 1 s");
        let e = cutter.confirm().expect("the switch reads its state back").unwrap_err();
        assert!(matches!(&e, ControllerError::Readback(PowerError::Unsupported { .. })), "{e:?}");
        assert_eq!(e.to_string(), "cannot read the switch state back after the cut: power switch dead relay cannot read its state");
        let e = cutter.power_on_if_off().unwrap_err();
        assert!(matches!(&e, ControllerError::Power(PowerError::Unsupported { .. })), "{e:?}");
    }

    #[test]
    fn an_emulator_that_would_not_start_keeps_the_io_error() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "pty busy");
        let e = ControllerError::Emulator { switch: SimSwitch::LcusSerial, source: Shared::new(io) };
        let src = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the io error");
        assert_eq!(src.kind(), std::io::ErrorKind::AddrInUse);
        assert!(e.to_string().ends_with("emulator: pty busy"), "{e}");
    }

    #[test]
    fn an_agents_report_reads_as_before() {
        let e = ControllerError::Remote {
            host: "host-b".into(),
            reset: Some(ResetKind::NvmeController),
            controller: "nvme-reset:///dev/nvme0".into(),
            message: "busy".into(),
        };
        assert_eq!(e.to_string(), "host-b: nvme-controller-reset of nvme-reset:///dev/nvme0: busy");
        let e = ControllerError::NoReport { host: "host-b".into(), reset: None };
        assert_eq!(e.to_string(), "host-b: its agent did not report its reset (its cycle ended before the reset, or the host was lost)");
        let m = ControllerError::from(Missing::WhichPort { controller: "quarch".into(), ports: vec!["A".into(), "B".into()] });
        assert_eq!(m.to_string(), "fault.port: quarch has ports [A, B]: name one");
    }
}
