//! `exec:?pull=CMD&plug=CMD&ports=A,B`: a link controller as the user's shell commands, for
//! whatever disconnects one port of a drive that faultline has no driver for (a lab's QMP
//! `device_del`/`device_add`, a vendor's fixture tool, a BMC). `{port}` in each command is
//! replaced by the port's name. A port pull runs `pull`, holds the link down, then runs `plug`;
//! each command's exit status is the answer (non-zero: the operation failed), as for `exec:`
//! power switches ([`super::exec::run`]: `sh -c`, its own process group, a timeout).

use crate::link::{LinkController, LinkError, PortCaps, ResetKind};
use std::time::Duration;

pub struct ExecLink {
    pull: String,
    plug: String,
    ports: Vec<String>,
    timeout: Duration,
    log: Vec<String>,
}

impl ExecLink {
    pub fn new(pull: &str, plug: &str, ports: &[String], timeout: Duration) -> ExecLink {
        ExecLink { pull: pull.into(), plug: plug.into(), ports: ports.to_vec(), timeout, log: Vec::new() }
    }

    fn exec(&mut self, template: &str, port: &str) -> Result<(), LinkError> {
        let cmd = template.replace("{port}", port);
        let controller = self.name();
        let fail = |reason: String| LinkError::Failed { controller: controller.clone(), command: cmd.clone(), reason };
        let out = super::exec::run(&cmd, self.timeout).map_err(|e| fail(e.to_string()))?;
        self.log.push(out.transcript(&cmd));
        out.failure().map_or(Ok(()), |why| Err(fail(why)))
    }
}

impl LinkController for ExecLink {
    fn name(&self) -> String {
        crate::control::ControllerSpec::ExecLink {
            pull: self.pull.clone(),
            plug: self.plug.clone(),
            ports: self.ports.clone(),
            timeout_ms: self.timeout.as_millis() as u64,
        }
        .to_string()
    }

    fn ports(&self) -> Vec<PortCaps> {
        self.ports.iter().map(|p| PortCaps { port: p.clone(), kinds: vec![ResetKind::PortPull] }).collect()
    }

    fn reset(&mut self, port: &str, kind: ResetKind, hold: Duration) -> Result<(), LinkError> {
        self.require(port, kind)?;
        let (pull, plug) = (self.pull.clone(), self.plug.clone());
        self.exec(&pull, port)?;
        std::thread::sleep(hold);
        self.exec(&plug, port)
    }

    fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_runs_pull_then_plug_with_the_port_and_fails_on_a_failing_command() {
        let dir = std::env::temp_dir().join(format!("faultline-exec-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("log");
        let pull = format!("echo pull {{port}} >> {}", f.display());
        let plug = format!("echo plug {{port}} >> {}", f.display());
        let mut l = ExecLink::new(&pull, &plug, &["A".into(), "B".into()], Duration::from_secs(5));
        l.reset("B", ResetKind::PortPull, Duration::from_millis(1)).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "pull B\nplug B\n");
        assert_eq!(l.take_log().len(), 2);
        // A port it does not have, a kind it cannot do: refused before any command runs.
        assert!(l.reset("C", ResetKind::PortPull, Duration::ZERO).unwrap_err().to_string().contains("cannot do port-pull on port C"));
        assert!(l.reset("A", ResetKind::NvmeController, Duration::ZERO).is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "pull B\nplug B\n");
        // A plug that fails is a failed reset, quoting its output.
        let mut bad = ExecLink::new("true", "echo no way >&2; exit 3", &["A".into()], Duration::from_secs(5));
        let e = bad.reset("A", ResetKind::PortPull, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("exit 3") && e.contains("no way"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
