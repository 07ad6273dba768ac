//! `exec:` command hooks: anything else that can cut power (IPMI, a BMC's `power-util`, PDUs,
//! `sg_ses` slot power, pciehp) as the user's own shell commands.
//!
//! Each command runs under `sh -c` in its own process group with a timeout (the whole group is
//! killed when it passes); its exit status is the answer: non-zero is a failed operation,
//! never a cut. Its stdout and stderr go into the transcript ([`PowerSwitch::take_log`]) and
//! are quoted in errors. An optional `state` command reports the output state as the first
//! word of its stdout (`on` or `off`).
//!
//! The same spec is also a link controller ([`ExecLink`]): `off` takes one port's link down,
//! `on` brings it back, and each command learns which port and what kind of reset from its
//! environment (`FAULTLINE_PORT`, `FAULTLINE_RESET`, `FAULTLINE_HOLD_MS`), so one pair of
//! commands serves every port of a dual-port drive.

use crate::link::{LinkController, LinkError, PortCaps, ResetKind};
use crate::power::{PowerCaps, PowerError, PowerState, PowerSwitch};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct ExecSwitch {
    off: String,
    on: String,
    state: Option<String>,
    timeout: Duration,
    log: Vec<String>,
}

/// What one command did.
#[derive(Debug)]
pub struct ExecOutput {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ExecOutput {
    /// `exit N`, or `killed by a signal`.
    pub fn status_text(&self) -> String {
        self.status.map_or("killed by a signal".to_string(), |c| format!("exit {c}"))
    }

    /// The transcript line a controller logs: the command, its status and its output.
    pub fn transcript(&self, cmd: &str) -> String {
        format!("$ {cmd}\n[{}]\n{}{}", self.status_text(), self.stdout, self.stderr)
    }

    /// Why the command counts as failed (a non-zero or missing exit status), with its output;
    /// `None` when it exited 0.
    pub fn failure(&self) -> Option<String> {
        (self.status != Some(0))
            .then(|| format!("{} (stdout {:?}, stderr {:?})", self.status_text(), self.stdout.trim(), self.stderr.trim()))
    }
}

/// Why a command gave no exit status to go by.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start sh: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] std::io::Error),
    /// It ran past its timeout and its process group was killed; what it wrote until then.
    #[error("timed out after {after:?} and was killed (stdout {:?}, stderr {:?})", .stdout.trim(), .stderr.trim())]
    Timeout { after: Duration, stdout: String, stderr: String },
}

/// Longest output kept per stream.
const MAX_OUTPUT: u64 = 64 * 1024;

fn read_capped(mut r: impl Read) -> String {
    let mut buf = Vec::new();
    let _ = r.by_ref().take(MAX_OUTPUT).read_to_end(&mut buf);
    // Keep draining so the child never blocks on a full pipe.
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    String::from_utf8_lossy(&buf).into_owned()
}

/// Runs `cmd` under `sh -c`, killing its process group after `timeout`.
pub fn run(cmd: &str, timeout: Duration) -> Result<ExecOutput, ExecError> {
    run_with_env(cmd, &[], timeout)
}

/// [`run`], with `env` added to the command's environment.
pub fn run_with_env(cmd: &str, env: &[(&str, String)], timeout: Duration) -> Result<ExecOutput, ExecError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(ExecError::Spawn)?;
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || read_capped(out));
    let t_err = std::thread::spawn(move || read_capped(err));
    let end = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= end => {
                // The group, so that whatever the shell started dies too and the pipes close.
                let _ = Command::new("kill").arg("-KILL").arg("--").arg(format!("-{}", child.id())).status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(ExecError::Wait(e)),
        }
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    match status {
        None => Err(ExecError::Timeout { after: timeout, stdout, stderr }),
        Some(s) => Ok(ExecOutput { status: s.code(), stdout, stderr }),
    }
}

impl ExecSwitch {
    pub fn new(off: &str, on: &str, state: Option<&str>, timeout: Duration) -> ExecSwitch {
        ExecSwitch { off: off.into(), on: on.into(), state: state.map(str::to_string), timeout, log: Vec::new() }
    }

    fn exec(&mut self, cmd: &str) -> Result<String, PowerError> {
        let name = self.name();
        let fail = |reason: String| PowerError::Failed { switch: name, command: cmd.to_string(), reason };
        let out = match run(cmd, self.timeout) {
            Ok(o) => o,
            Err(e) => {
                self.log.push(format!("$ {cmd}\n{e}"));
                return Err(fail(e.to_string()));
            }
        };
        self.log.push(out.transcript(cmd));
        if let Some(why) = out.failure() {
            return Err(fail(why));
        }
        Ok(out.stdout)
    }
}

impl PowerSwitch for ExecSwitch {
    fn name(&self) -> String {
        crate::control::ControllerSpec::Exec {
            off: self.off.clone(),
            on: self.on.clone(),
            state: self.state.clone(),
            timeout_ms: self.timeout.as_millis() as u64,
        }
        .to_string()
    }
    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: self.state.is_some(), voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        let c = self.off.clone();
        self.exec(&c).map(drop)
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        let c = self.on.clone();
        self.exec(&c).map(drop)
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        let Some(c) = self.state.clone() else {
            return Err(PowerError::Unsupported { switch: self.name(), what: "read its state (no state=CMD in the spec)".into() });
        };
        let out = self.exec(&c)?;
        match out.split_whitespace().next().map(str::to_ascii_lowercase).as_deref() {
            Some("on") => Ok(PowerState::On),
            Some("off") => Ok(PowerState::Off),
            _ => Err(PowerError::Failed {
                switch: self.name(),
                command: c,
                reason: format!("expected output starting with on or off, got {:?}", out.trim()),
            }),
        }
    }
    fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }
}

/// `exec:` as a link controller: a reset of `port` runs `off`, keeps the link down for the
/// hold, then runs `on`; both with `FAULTLINE_PORT` (the port as the scenario names it: a
/// dual-port scenario's `fault_port`), `FAULTLINE_RESET` (the kind: `port-pull`,
/// `nvme-controller-reset`, ...) and `FAULTLINE_HOLD_MS` in their environment. What the
/// commands do is the user's, so it serves any port and any kind; a reset is done when both
/// exit 0, and a failure of either is the reset's failure (after a failed `off`, `on` is
/// still run, so that a half-done pull is undone where the commands can).
pub struct ExecLink {
    off: String,
    on: String,
    state: Option<String>,
    timeout: Duration,
}

impl ExecLink {
    pub fn new(off: &str, on: &str, state: Option<&str>, timeout: Duration) -> ExecLink {
        ExecLink { off: off.into(), on: on.into(), state: state.map(str::to_string), timeout }
    }

    fn exec(&self, cmd: &str, env: &[(&str, String)]) -> Result<(), LinkError> {
        let fail = |reason: String| LinkError::Failed { controller: self.name(), command: cmd.to_string(), reason };
        let out = run_with_env(cmd, env, self.timeout).map_err(|e| fail(e.to_string()))?;
        out.failure().map_or(Ok(()), |why| Err(fail(why)))
    }
}

impl LinkController for ExecLink {
    fn name(&self) -> String {
        crate::control::ControllerSpec::Exec {
            off: self.off.clone(),
            on: self.on.clone(),
            state: self.state.clone(),
            timeout_ms: self.timeout.as_millis() as u64,
        }
        .to_string()
    }
    /// None named: the commands take any port (see [`ExecLink::require`]).
    fn ports(&self) -> Vec<PortCaps> {
        Vec::new()
    }
    fn reset(&mut self, port: &str, kind: ResetKind, hold: Duration) -> Result<(), LinkError> {
        let env = [
            ("FAULTLINE_PORT", port.to_string()),
            ("FAULTLINE_RESET", kind.to_string()),
            ("FAULTLINE_HOLD_MS", hold.as_millis().to_string()),
        ];
        let (off, on) = (self.off.clone(), self.on.clone());
        let down = self.exec(&off, &env);
        if down.is_ok() {
            std::thread::sleep(hold);
        }
        let up = self.exec(&on, &env);
        down.and(up)
    }
    /// Any non-empty port, any kind: the commands are the user's.
    fn require(&self, port: &str, kind: ResetKind) -> Result<(), LinkError> {
        if port.trim().is_empty() {
            return Err(LinkError::Unsupported { controller: self.name(), port: port.into(), kind, supported: "any named port".into() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_decides_and_output_is_kept() {
        let mut s = ExecSwitch::new("echo cutting; exit 0", "echo nope >&2; exit 3", Some("echo OFF"), Duration::from_secs(5));
        s.power_off().unwrap();
        let e = s.power_on().unwrap_err().to_string();
        assert!(e.contains("exit 3") && e.contains("nope") && e.contains("echo nope"), "{e}");
        assert_eq!(s.state().unwrap(), PowerState::Off);
        let log = s.take_log().join("\n");
        assert!(log.contains("cutting") && log.contains("nope"), "{log}");
        assert!(s.capabilities().state_readback);
    }

    #[test]
    fn a_hung_command_is_killed_at_the_timeout() {
        let mut s = ExecSwitch::new("sleep 5; echo never", "true", None, Duration::from_millis(200));
        let t = Instant::now();
        let e = s.power_off().unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
        assert!(matches!(s.state(), Err(PowerError::Unsupported { .. })));
    }

    #[test]
    fn a_timeout_quotes_what_the_command_wrote_trimmed() {
        let e = ExecError::Timeout { after: Duration::from_millis(200), stdout: " half\n".into(), stderr: String::new() };
        assert_eq!(e.to_string(), "timed out after 200ms and was killed (stdout \"half\", stderr \"\")");
    }

    #[test]
    fn state_output_must_say_on_or_off() {
        let mut s = ExecSwitch::new("true", "true", Some("echo maybe"), Duration::from_secs(5));
        assert!(s.state().unwrap_err().to_string().contains("maybe"));
    }

    #[test]
    fn as_a_link_controller_each_command_learns_the_port_the_kind_and_the_hold() {
        let dir = std::env::temp_dir().join(format!("faultline-execlink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let off = format!("echo \"off $FAULTLINE_PORT $FAULTLINE_RESET $FAULTLINE_HOLD_MS\" >> {}", log.display());
        let on = format!("echo \"on $FAULTLINE_PORT\" >> {}", log.display());
        let mut l = ExecLink::new(&off, &on, None, Duration::from_secs(5));
        l.require("/dev/loop7", ResetKind::PortPull).unwrap();
        assert!(l.require(" ", ResetKind::PortPull).is_err());
        let t = Instant::now();
        l.reset("/dev/loop7", ResetKind::PortPull, Duration::from_millis(120)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(120), "the link stays down for the hold");
        l.reset("B", ResetKind::NvmeController, Duration::ZERO).unwrap();
        let got = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got, "off /dev/loop7 port-pull 120\non /dev/loop7\noff B nvme-controller-reset 0\non B\n");
        // A failed pull is the reset's failure, and the plug still runs.
        let mut bad = ExecLink::new("echo no >&2; exit 4", "echo plugged", None, Duration::from_secs(5));
        let e = bad.reset("A", ResetKind::PortPull, Duration::from_millis(1)).unwrap_err().to_string();
        assert!(e.contains("exit 4") && e.contains("no"), "{e}");
    }
}
