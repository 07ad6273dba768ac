//! How the coordinator reaches a host's agent: a transport command whose stdin and stdout
//! carry the protocol, `ssh` by default. What a scenario names and checks, kept apart from the
//! wire (`agent::coordinator::session` starts it), so that the scenario imports nothing of the wire.

/// The default transport, `{host}` standing for the host's name.
pub const SSH: &[&str] = &["ssh", "-o", "BatchMode=yes", "{host}", "faultline", "agent", "--stdio"];

/// A transport command, ready to start for one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transport {
    pub argv: Vec<String>,
}

impl Transport {
    /// `template` with `{host}` replaced by `host` in each argument. The command is run as
    /// given, never through a shell.
    pub fn new(template: &[String], host: &str) -> Result<Transport, TransportError> {
        let argv: Vec<String> = template.iter().map(|a| a.replace("{host}", host)).collect();
        match argv.first() {
            None => Err(TransportError::Empty),
            Some(p) if p.is_empty() => Err(TransportError::NoProgram),
            Some(_) => Ok(Transport { argv }),
        }
    }

    /// The default, over ssh.
    pub fn ssh(host: &str) -> Transport {
        Transport::new(&SSH.iter().map(|s| s.to_string()).collect::<Vec<_>>(), host).expect("the default transport is not empty")
    }
}

/// A transport command that cannot be run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("the transport command is empty")]
    Empty,
    #[error("the transport command's program is empty")]
    NoProgram,
}
