//! The `faultline` binary: argument parsing, output, the wall clock, OS randomness and exit
//! codes. All logic lives in the library, which returns verdicts; this crate only wires it to
//! the command line, one file per command under `cmd/`. Exit codes ([`Exit`]): 0 clean,
//! 1 findings, 2 harness error (bad arguments, unreadable ledger, wrong target).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod args;
mod cmd;
mod exit;
mod metrics;

use exit::Exit;

#[derive(Parser)]
#[command(name = "faultline", version, about = "Proves or breaks an SSD's durability promises under power loss.")]
pub(crate) struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the cycles a scenario file describes (`faultline run SCENARIO.toml`); without one,
    /// the embedded demo (scenarios/demo.toml): a simulated drive behind the Quarch emulator on
    /// a pseudo-terminal, no hardware needed.
    Run(cmd::run::RunArgs),
    /// Take up a run of `faultline run` after the harness died (killed, or its host rebooted):
    /// finishes the cycle it died in and runs the rest.
    Resume(cmd::run::ResumeArgs),
    /// Write tagged data over a target, recording the ledger in a run directory. Running it
    /// again on the same run directory continues the run as a new cycle; killing it is the
    /// manual power-loss mode.
    Write(Box<cmd::write::WriteArgs>),
    /// Verify every sector of the span against the ledger.
    Verify(cmd::verify::VerifyArgs),
    /// Print the identity of the sectors in a byte range of a target or dump file.
    Decode(cmd::decode::DecodeArgs),
    /// Run the detection matrix: every fault model against the verifier, with ground truth.
    Selftest(cmd::selftest::SelftestArgs),
    /// Benchmark faultline against fio on the same target, alternating (overwrites it).
    Bench(cmd::bench::BenchArgs),
    /// Bring-up of power and link controllers: `controller list`, or
    /// `controller SPEC identify|status|on|off|cycle [--off-ms N]`.
    Controller(cmd::controller::ControllerArgs),
    /// Rebuild summary.json, junit.xml and report.html of a run directory from its event
    /// log (events.jsonl); exits with the run's verdict.
    Report(cmd::report::ReportArgs),
    /// Follow a run's event log live (from another terminal, or over ssh): progress, each
    /// cycle with new findings, the verdict; exits with the run's exit code. Goes on across
    /// `faultline resume`.
    Watch(cmd::watch::WatchArgs),
    /// Run one controller emulator on its own, with a simulated drive behind it, for bringing
    /// up lab scripts without hardware: `emulate quarch|lcus|numato --pty | --tcp ADDR`; or the
    /// simulated drive itself over NBD: `emulate nbd --unix PATH | --tcp ADDR`.
    /// Prints where it listens, logs each command and reply on stderr, runs until SIGINT or
    /// SIGTERM.
    Emulate(cmd::emulate::EmulateArgs),
    /// The virtual lab: faultline in a QEMU guest against the real Linux NVMe driver on an
    /// emulated dual-port drive (`lab setup`, `lab run SCENARIO`, `lab exec SCRIPT`,
    /// `lab shell`; docs/LAB.md).
    Lab(cmd::lab::LabArgs),
    /// An agent for a coordinator on another host: `agent --stdio` serves one over stdin and
    /// stdout (what `ssh HOST faultline agent --stdio` starts); `agent --check HOST...` dials
    /// each host's agent and prints what answered and its clock (docs/PROTOCOL.md).
    Agent(cmd::agent::AgentArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(cmd::extras::CompletionsArgs),
    /// Install the man pages and the bash, zsh and fish completions under --prefix
    /// (default /usr/local), generated from this binary's own options.
    InstallExtras(cmd::extras::InstallExtrasArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Write(a) => cmd::write::cmd_write(*a),
        Cmd::Verify(a) => cmd::verify::cmd_verify(a),
        Cmd::Decode(a) => cmd::decode::cmd_decode(a),
        Cmd::Selftest(a) => cmd::selftest::cmd_selftest(a),
        Cmd::Run(a) => cmd::run::cmd_run(a),
        Cmd::Resume(a) => cmd::run::cmd_resume(&a.run_dir, &a.metrics),
        Cmd::Bench(a) => cmd::bench::cmd_bench(a),
        Cmd::Controller(a) => cmd::controller::cmd_controller(a),
        Cmd::Report(a) => cmd::report::cmd_report(a),
        Cmd::Watch(a) => cmd::watch::cmd_watch(a),
        Cmd::Emulate(a) => cmd::emulate::cmd_emulate(a),
        Cmd::Lab(a) => cmd::lab::cmd_lab(a),
        Cmd::Agent(a) => cmd::agent::cmd_agent(a),
        Cmd::Completions(a) => cmd::extras::cmd_completions(a),
        Cmd::InstallExtras(a) => cmd::extras::cmd_install_extras(a),
    };
    match r {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("faultline: error: {}", chain(&e));
            Exit::HarnessError.into()
        }
    }
}

/// The error and its causes, `outer: cause: ...`, each cause left out when the message before
/// it already says it: an error that prints its source (`cannot open X: No such file or
/// directory (os error 2)`) and also returns it as its source would otherwise print it twice.
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// OS randomness for ids and default seeds, without a dependency: std's hasher keys come
/// from the OS.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

pub(crate) fn now() -> String {
    chrono::Local::now().to_rfc3339()
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open target {path}: {source}")]
    struct Open {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn an_error_that_prints_its_source_is_not_followed_by_it_again() {
        let io = || std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::new(Open { path: "/x".into(), source: io() });
        assert_eq!(chain(&e), "cannot open target /x: No such file or directory (os error 2)");
        // A context that does not repeat its cause still shows it.
        let e = anyhow::Error::new(io()).context("reading the scenario");
        assert_eq!(chain(&e), "reading the scenario: No such file or directory (os error 2)");
        let e = anyhow::Error::new(Open { path: "/x".into(), source: io() }).context("faultline write");
        assert_eq!(chain(&e), "faultline write: cannot open target /x: No such file or directory (os error 2)");
    }
}
