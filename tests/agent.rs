//! The agent and its coordinator's transport (docs/PROTOCOL.md): `faultline agent --check`
//! through a local child and through a real OpenSSH server on loopback (Debian's
//! `openssh-server`, installed by `.ci/run`), started by the test with host and user keys it
//! generates; an unknown host key and an unauthorised user key are each refused, saying so;
//! the agent's own refusals (another run's frame, an unknown version, an oversized frame, a
//! second hello) through the real binary; a stalled transport (SIGSTOP) is a bounded,
//! inconclusive timeout. The clock offset of an agent on this host is checked against the
//! truth: both read one CLOCK_MONOTONIC, so the offset is within its uncertainty of zero.

mod common;

use common::{scratch, skip, text, BIN};
use faultline::agent::dial::{self, DialError, Transport};
use faultline::agent::proto::{self, Frame, Nonce, Op};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn local() -> Transport {
    Transport::new(&[BIN.to_string(), "agent".into(), "--stdio".into()], "here").unwrap()
}

fn nonce() -> Nonce {
    Nonce::from_words(0x2026_1204, 24)
}

/// `agent --check` through a local child: what answered, protocol 1, and its clock.
#[test]
fn agent_check_through_a_local_child_names_the_agent_and_its_clock() {
    let o = Command::new(BIN).args(["agent", "--check", "here", "--transport", "local"]).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("here: faultline ") && out.contains("protocol 1, exec faults not allowed"), "{out}");
    assert!(out.contains("here: clock: agent = coordinator ") && out.contains("the best of 16 round trips"), "{out}");
}

/// Both ends read this host's CLOCK_MONOTONIC: the agent's reading lies inside each round
/// trip, so the offset found is zero to within its uncertainty.
#[test]
fn an_agent_on_this_host_has_a_clock_offset_of_zero_within_its_uncertainty() {
    let mut s = dial::dial(&local(), "here", &nonce(), "test", Duration::from_secs(20)).unwrap();
    assert_eq!(s.version, 1);
    assert_eq!(s.agent.pid, s.pid(), "the agent is the transport's process here");
    let c = s.clock(32, Duration::from_secs(10)).unwrap();
    assert!(c.offset_ns.unsigned_abs() <= c.uncertainty_ns, "{c:?}");
    assert!(c.uncertainty_ns > 0 && c.best_rtt_ns < 1_000_000_000, "{c:?}");
    s.bye(Duration::from_secs(5)).unwrap();
}

/// A stalled transport (its process stopped: a partition) is a timeout within the bound,
/// named inconclusive, never a hang.
#[test]
fn a_stalled_transport_is_a_bounded_inconclusive_timeout() {
    let mut s = dial::dial(&local(), "here", &nonce(), "test", Duration::from_secs(20)).unwrap();
    let pid = s.pid().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let t0 = Instant::now();
    let e = s.call(Op::Clock, Duration::from_millis(500)).unwrap_err();
    let waited = t0.elapsed();
    assert!(matches!(e, DialError::Timeout { .. }) && e.to_string().contains("inconclusive"), "{e}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Killed while stopped (the host's power cut): the session ends, saying so.
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let e = s.call(Op::Clock, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, DialError::Ended { .. }), "{e}");
}

/// The real binary's agent, fed frames by hand: each refusal is a last `refused` frame saying
/// why, and the agent exits 2.
#[test]
fn the_agent_refuses_another_run_an_unknown_version_an_oversized_frame_and_a_second_hello() {
    let run = nonce();
    let other = Nonce::from_words(7, 7);
    let hello = |versions: Vec<u32>, run: &Nonce| Frame::Hello { versions, run: run.clone(), coordinator: "coordinator-1".into() };
    let cases: Vec<(Vec<Frame>, Option<u32>, &str)> = vec![
        (vec![hello(vec![1], &run), Frame::Request { run: other.clone(), seq: 1, op: Op::Clock }], None, "a frame of run 0000000000000007"),
        (vec![hello(vec![2, 3], &run)], None, "speaks protocol version(s) [1]; coordinator coordinator-1 offered [2, 3]"),
        (vec![hello(vec![1], &run)], Some(proto::MAX_FRAME + 1), "at most 1048576"),
        (vec![hello(vec![1], &run), hello(vec![1], &other)], None, "a second hello (coordinator coordinator-1, run 0000000000000007"),
    ];
    for (frames, oversized, says) in cases {
        let mut child = Command::new(BIN)
            .args(["agent", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = Vec::new();
        for f in &frames {
            proto::write_frame(&mut input, f).unwrap();
        }
        if let Some(len) = oversized {
            input.extend_from_slice(&len.to_be_bytes());
        }
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let o = child.wait_with_output().unwrap();
        let mut r = &o.stdout[..];
        let mut last = None;
        while let Ok(f) = proto::read_frame(&mut r) {
            last = Some(f);
        }
        match last {
            Some(Frame::Refused { why, ours, .. }) => assert!(why.contains(says) && ours == vec![1], "{why}"),
            other => panic!("{says}: no refused frame last: {other:?}\n{}", text(&o)),
        }
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{}", text(&o));
    }
}

/// Debian's sshd on a loopback port, with keys made for the test.
struct Sshd {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let o = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "faultline-test", "-f"]).arg(path).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

fn sshd(test: &str) -> Option<Sshd> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.exists() || Command::new("ssh").arg("-V").output().is_err() {
        skip(test, "no OpenSSH server (/usr/sbin/sshd, Debian package openssh-server) or client");
        return None;
    }
    // sshd's privilege separation needs root.
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        skip(test, "sshd's privilege separation needs root");
        return None;
    }
    let dir = scratch(&format!("sshd-{test}"));
    keygen(&dir.join("host_key"));
    keygen(&dir.join("user_key"));
    keygen(&dir.join("stranger_key"));
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
         StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
         PermitRootLogin prohibit-password\nAllowUsers {user}\n",
        d = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config).unwrap();
    let mut child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let end = Instant::now() + Duration::from_secs(10);
    let mut said = Vec::new();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        said.extend(rx.try_iter());
        if let Ok(Some(s)) = child.try_wait() {
            panic!("sshd exited ({s}): {said:?}");
        }
        assert!(Instant::now() < end, "sshd never listened on {port}: {said:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
    std::fs::write(dir.join("known_hosts"), format!("[127.0.0.1]:{port} {host_pub}")).unwrap();
    std::fs::write(dir.join("empty_known_hosts"), "").unwrap();
    Some(Sshd { child, port, dir })
}

impl Sshd {
    /// The transport a lab gives for this server: the system's ssh with the test's files.
    fn transport(&self, key: &str, known_hosts: &str) -> String {
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        format!(
            "ssh -o BatchMode=yes -o IdentitiesOnly=yes -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile={d}/{known_hosts} \
             -i {d}/{key} -p {port} {user}@{{host}} {BIN} agent --stdio",
            d = self.dir.display(),
            port = self.port
        )
    }

    fn check(&self, key: &str, known_hosts: &str) -> std::process::Output {
        let t = self.transport(key, known_hosts);
        Command::new(BIN).args(["agent", "--check", "127.0.0.1", "--transport", &t, "--timeout-s", "20"]).output().unwrap()
    }
}

/// Through a real OpenSSH server on loopback: the agent answers through the lab's own ssh
/// (its keys, its known_hosts); an unknown host key and an unauthorised user key are refused,
/// each saying what to do.
#[test]
fn over_real_ssh_the_agent_answers_and_unknown_host_keys_and_user_keys_are_refused() {
    let test = "over_real_ssh_the_agent_answers_and_unknown_host_keys_and_user_keys_are_refused";
    let Some(d) = sshd(test) else { return };
    let o = d.check("user_key", "known_hosts");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("127.0.0.1: faultline ") && out.contains("protocol 1"), "{out}");
    // The same host's clock, through ssh: zero within the uncertainty, which ssh makes larger.
    let line = out.lines().find_map(|l| l.strip_prefix("127.0.0.1: clock: agent = coordinator ")).unwrap_or_else(|| panic!("{out}"));
    let num = |s: &str| s.trim().trim_end_matches(" us").parse::<f64>().unwrap_or_else(|_| panic!("{line}"));
    let (offset, rest) = line.split_once(", within ").unwrap();
    let uncertainty = num(rest.split(" (").next().unwrap());
    let offset = num(&offset.replace(['+', '-'], ""));
    assert!(offset <= uncertainty, "one host's clock through ssh: {line}");

    let o = d.check("user_key", "empty_known_hosts");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("its host key is not one known_hosts trusts") && out.contains("Host key verification failed"), "{out}");
    assert!(out.contains("faultline never turns host-key checking off"), "{out}");

    let o = d.check("stranger_key", "known_hosts");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("127.0.0.1 refused the user key") && out.contains("Permission denied"), "{out}");

    // A connection nobody answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = d.transport("user_key", "known_hosts").replace(&format!("-p {}", d.port), &format!("-p {closed}"));
    let o = Command::new(BIN).args(["agent", "--check", "127.0.0.1", "--transport", &t]).output().unwrap();
    assert!(text(&o).contains("cannot be reached") && text(&o).contains("Connection refused"), "{}", text(&o));
}

/// The default transport never turns host-key checking off.
#[test]
fn the_default_transport_is_ssh_in_batch_mode_with_host_key_checking_left_on() {
    let t = Transport::ssh("lab-host-1");
    assert_eq!(t.argv, ["ssh", "-o", "BatchMode=yes", "lab-host-1", "faultline", "agent", "--stdio"]);
    assert!(!t.argv.iter().any(|a| a.contains("StrictHostKeyChecking") || a.contains("UserKnownHostsFile=/dev/null")));
    let e = Transport::new(&[], "h").unwrap_err();
    assert!(e.contains("empty"), "{e}");
}
