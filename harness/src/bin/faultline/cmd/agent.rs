//! `faultline agent --stdio`: serve one coordinator on stdin/stdout (what the transport
//! starts on a host: `ssh HOST faultline agent --stdio`). `faultline agent --check HOST...`:
//! dial each host's agent as a run would, and print what answered, its protocol version and
//! its clock against this host's (docs/PROTOCOL.md).

use crate::exit::Exit;
use anyhow::{bail, Result};
use faultline::remote::agent::serve::{self, Ended, ServeOptions};
use faultline::remote::coordinator::session::{self as dial, Transport};
use faultline::remote::proto::Nonce;
use std::time::Duration;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["stdio", "check"])))]
pub struct AgentArgs {
    /// Serve one coordinator over stdin and stdout (diagnostics on stderr), until it says
    /// goodbye or goes away.
    #[arg(long)]
    stdio: bool,
    /// Let the coordinator run this host's `exec:` fault commands (off unless given).
    #[arg(long, requires = "stdio")]
    allow_exec: bool,
    /// A target this agent may open for its coordinator (repeatable): a block device, a file
    /// or an NBD export (nbd+unix:///EXPORT?socket=PATH, nbd://HOST[:PORT]/EXPORT). The
    /// coordinator names one of these; it cannot make the agent open anything else.
    #[arg(long, value_name = "PATH_OR_URI", requires = "stdio")]
    target: Vec<String>,
    /// Dial the agent of each HOST through the transport, as a run would, and print what
    /// answered and its clock offset; exits 2 at the first that does not answer.
    #[arg(long, value_name = "HOST", num_args = 1..)]
    check: Vec<String>,
    /// The transport command, `{host}` standing for the host, split at spaces and run without
    /// a shell; `local` runs this binary's agent as a child. Default:
    /// `ssh -o BatchMode=yes {host} faultline agent --stdio`.
    #[arg(long, value_name = "COMMAND", requires = "check")]
    transport: Option<String>,
    /// Seconds the handshake and each answer may take.
    #[arg(long, default_value_t = 20, requires = "check")]
    timeout_s: u64,
}

pub fn cmd_agent(a: AgentArgs) -> Result<Exit> {
    if a.stdio {
        let o = ServeOptions {
            software: format!("faultline {}", env!("CARGO_PKG_VERSION")),
            host: hostname(),
            pid: std::process::id(),
            allow_exec: a.allow_exec,
            targets: a.target,
        };
        let mut w = std::io::stdout().lock();
        return match serve::serve(std::io::stdin(), &mut w, &o) {
            Ok(Ended::Bye | Ended::Closed) => Ok(Exit::Clean),
            // The coordinator went away mid-operation: the agent stopped it and says so; the
            // run it was part of is broken (exit 2).
            Ok(Ended::Left { op, seq, submitted_after }) => {
                let after = match submitted_after {
                    None => "nothing was submitted after it went".to_string(),
                    Some(d) => format!("the last write was submitted {:.3} ms after it went", d.as_secs_f64() * 1e3),
                };
                eprintln!("agent: the coordinator went away during request {seq} ({op}); stopped it: {after}");
                Ok(Exit::HarnessError)
            }
            Err(e) => bail!("agent: {e}"),
        };
    }
    let template: Vec<String> = match a.transport.as_deref() {
        Some("local") => {
            let me = std::env::current_exe()?.display().to_string();
            vec![me, "agent".into(), "--stdio".into()]
        }
        Some(t) => t.split_whitespace().map(str::to_string).collect(),
        None => dial::SSH.iter().map(|s| s.to_string()).collect(),
    };
    let timeout = Duration::from_secs(a.timeout_s.max(1));
    let run = Nonce::from_words(crate::random_u64(), crate::random_u64());
    let me = format!("{}:{} (faultline agent --check)", hostname(), std::process::id());
    for host in &a.check {
        let t = Transport::new(&template, host)?;
        let mut s = dial::dial(&t, host, &run, &me, timeout)?;
        let c = s.clock(16, timeout)?;
        let ag = s.agent.clone();
        println!(
            "{host}: {} on {} (pid {}), protocol {}, exec faults {}",
            ag.software,
            ag.host,
            ag.pid,
            s.version,
            if ag.allow_exec { "allowed" } else { "not allowed" }
        );
        println!(
            "{host}: clock: agent = coordinator {} {:.1} us, within {:.1} us (the best of {} round trips, {:.1} us)",
            if c.offset_ns < 0 { "-" } else { "+" },
            c.offset_ns.unsigned_abs() as f64 / 1e3,
            c.uncertainty_ns as f64 / 1e3,
            c.samples,
            c.best_rtt_ns as f64 / 1e3
        );
        s.bye(timeout)?;
    }
    Ok(Exit::Clean)
}

/// This host's name (`/proc/sys/kernel/hostname`), for the peer's messages.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown-host".into())
}
