//! The agent and its coordinator's transport (docs/PROTOCOL.md): `faultline agent --check`
//! through a local child and through a real OpenSSH server on loopback (Debian's
//! `openssh-server`, installed by `.ci/run`), started by the test with host and user keys it
//! generates; an unknown host key and an unauthorised user key are each refused, saying so;
//! the agent's own refusals (another run's frame, an unknown version, an oversized frame, a
//! second hello) through the real binary; a stalled transport (SIGSTOP) is a bounded,
//! inconclusive timeout. The clock offset of an agent on this host is checked against the
//! truth: both read one CLOCK_MONOTONIC, so the offset is within its uncertainty of zero.

mod hostile;

use crate::common::{scratch, skip, text, BIN};
use faultline::remote::coordinator::session::{self as dial, DialError, Transport};
use faultline::remote::proto::{self, Frame, Nonce, Op};
use faultline::runner::{ControllerError, Missing};
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

/// `agent --check` through a local child: what answered, protocol 6, and its clock.
#[test]
fn agent_check_through_a_local_child_names_the_agent_and_its_clock() {
    let o = Command::new(BIN).args(["agent", "--check", "here", "--transport", "local"]).output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("here: faultline ") && out.contains("protocol 6, exec faults not allowed"), "{out}");
    assert!(out.contains("here: clock: agent = coordinator ") && out.contains("the best of 16 round trips"), "{out}");
}

/// Both ends read this host's CLOCK_MONOTONIC: the agent's reading lies inside each round
/// trip, so the offset found is zero to within its uncertainty.
#[test]
fn an_agent_on_this_host_has_a_clock_offset_of_zero_within_its_uncertainty() {
    let mut s = dial::dial(&local(), "here", &nonce(), "test", Duration::from_secs(20)).unwrap();
    assert_eq!(s.version, 6);
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
    let e = s.call(Op::Clock {}, Duration::from_millis(500)).unwrap_err();
    let waited = t0.elapsed();
    assert!(matches!(e, DialError::Timeout { .. }) && e.to_string().contains("inconclusive"), "{e}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Killed while stopped (the host's power cut): the session ends, saying so.
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let e = s.call(Op::Clock {}, Duration::from_secs(5)).unwrap_err();
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
        (
            vec![hello(vec![6], &run), Frame::Request { run: other.clone(), seq: 1, op: Op::Clock {} }],
            None,
            "a frame of run 0000000000000007",
        ),
        (
            vec![hello(vec![1, 2, 3, 4, 5, 7], &run)],
            None,
            "speaks protocol version(s) [6]; coordinator coordinator-1 offered [1, 2, 3, 4, 5, 7]",
        ),
        (vec![hello(vec![6], &run)], Some(proto::MAX_FRAME + 1), "at most 1048576"),
        (vec![hello(vec![6], &run), hello(vec![5], &other)], None, "a second hello (coordinator coordinator-1, run 0000000000000007"),
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
            Some(Frame::Refused { why, ours, .. }) => assert!(why.contains(says) && ours == vec![6], "{why}"),
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
    assert!(out.contains("127.0.0.1: faultline ") && out.contains("protocol 6"), "{out}");
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
    assert!(e.to_string().contains("empty"), "{e}");
}

// ---------------------------------------------------------------------------------------
// A port's cycle over the wire: the agent writes, the coordinator keeps the ledger.

/// `faultline emulate nbd` (an honest PLP drive) on a loopback port: the emulator and the
/// export's URI.
struct Drive {
    child: Child,
    uri: String,
}

impl Drop for Drive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drive(seed: u64) -> Drive {
    let mut child = Command::new(BIN)
        .args(["emulate", "nbd", "--tcp", "127.0.0.1:0", "--model", "honest-plp", "--seed", &seed.to_string(), "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut uri = None;
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "emulate nbd ended early");
        if let Some(u) = line.trim_end().strip_prefix("nbd uri: ") {
            uri = Some(u.to_string());
        }
        if line.starts_with("stop with") {
            break;
        }
    }
    Drive { child, uri: uri.expect("the emulator names its URI") }
}

/// One port's run on the coordinator: its ledger in its own run directory, its share of the
/// drive's span.
struct PortRun {
    run: faultline::run::OpenRun,
    port: faultline::port::PortId,
}

fn port_run(d: &Path, name: &str, facts: &faultline::run::DeviceFacts, span: (u64, u64), seed: u64, port: u8) -> PortRun {
    use faultline::ledger::{Contract, RunHeader, TargetFacts};
    use faultline::workload::{FlushPolicy, Pattern, WorkloadSpec};
    let dir = d.join(name);
    let spec = WorkloadSpec {
        seed,
        pattern: Pattern::Random {},
        span_start: span.0,
        span_end: span.1,
        min_write_bytes: 4096,
        max_write_bytes: 32768,
        mean_write_bytes: 8192,
        align_bytes: 4096,
        queue_depth: 16,
        flush: FlushPolicy { every_writes: None, every_ms: None, fua_percent: 0 },
        ops: Default::default(),
    };
    let header = || {
        let t = TargetFacts {
            identity: facts.identity.clone(),
            capacity: facts.capacity_bytes,
            sector_bytes: 512,
            atomic_bytes: 4096,
            dealloc_reads: Default::default(),
        };
        RunHeader::new(seed ^ 0xA6E7, "2026-12-05T00:00:00Z".into(), t, Contract::Plp, faultline::port::PortEntry::single(), spec)
    };
    let run = faultline::run::open_run(&dir, facts, header).unwrap();
    PortRun { run, port: faultline::port::PortId(port) }
}

impl PortRun {
    fn request(&self, cut: Option<faultline::writer::CutPlacement>, duration_ms: u64) -> proto::CycleRequest {
        let (cycle, first_id) = self.run.next_cycle();
        proto::CycleRequest {
            header: self.run.history().header.clone(),
            cycle,
            first_id,
            started_at: "2026-12-05T00:00:00Z".into(),
            port: self.port,
            max_writes: None,
            duration_ms: Some(duration_ms),
            cut,
            stream_every_ms: STREAM_EVERY_MS,
            drain_timeout_ms: 5_000,
            samples: false,
            reset: None,
        }
    }

    /// Verifies the port's share through this process's own NBD connection, against the
    /// coordinator's ledger.
    fn verify(&self, uri: &str) -> faultline::verify::VerifyReport {
        let spec = faultline_drivers::OpenSpec {
            writable: false,
            queue_depth: 16,
            expect: Default::default(),
            allow_overwrite_signature: true,
            io_threads: 1,
        };
        let mut t = faultline_drivers::open_target(Path::new(uri), &spec).unwrap().target;
        let w = &self.run.layout.spec().clone();
        let v = faultline::verify::Verifier::new(&self.run.layout, self.run.history(), &self.run.format);
        v.verify(t.as_mut(), w.span_start, w.span_end).unwrap()
    }
}

/// How often the agents stream what is durable.
const STREAM_EVERY_MS: u64 = 1;

fn agent_for(uri: &str) -> Transport {
    Transport::new(&[BIN.to_string(), "agent".into(), "--stdio".into(), "--target".into(), uri.into()], "host-a").unwrap()
}

/// One simulated drive over NBD, one agent dialled to it with its target open, and a port's
/// run over the first 16 MiB.
struct OneAgent {
    d: std::path::PathBuf,
    drv: Drive,
    s: dial::Session,
    a: PortRun,
    timeout: Duration,
}

fn one_agent(name: &str, seed: u64, run_word: u64) -> OneAgent {
    let d = scratch(name);
    let drv = drive(seed);
    let timeout = Duration::from_secs(20);
    let mut s = dial::dial(&agent_for(&drv.uri), "host-a", &Nonce::from_words(seed, run_word), "test", timeout).unwrap();
    let info = s.open(&drv.uri, None, 16, timeout).unwrap();
    let a = port_run(&d, "host-a", &info.facts(), (0, 16 << 20), seed, 0);
    OneAgent { d, drv, s, a, timeout }
}

fn policy() -> faultline::remote::coordinator::cycle::StreamPolicy {
    faultline::remote::coordinator::cycle::StreamPolicy {
        ledger_checkpoint_every: Duration::from_millis(500),
        silence: Duration::from_secs(10),
    }
}

/// Whole-host power loss at seeded moments: host A's agent is SIGKILLed in every phase of its
/// cycle (before its first record, while it writes, while its cut runs), 36 times, while host
/// B's agent writes its own share of the same drive. Each time the coordinator closes A's
/// cycle from what it held and a verify of A's share (through the coordinator's own NBD
/// connection) finds nothing: a write it never heard complete is "may", never "must". B's
/// cycles all end as they should and its share verifies clean. The acknowledged writes the
/// coordinator lacked are measured per kill: A's uncertain writes found whole on the drive (an
/// upper bound: a write the drive applied but had not yet acknowledged counts too).
#[test]
fn agents_killed_at_seeded_moments_leave_the_coordinator_no_blind_window_and_no_false_finding() {
    let _alone = crate::common::alone(); // kill and cut timings within milliseconds
    use faultline::remote::coordinator::cycle::CycleError;
    let seed: u64 = std::env::var("FAULTLINE_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261205);
    let d = scratch("kills");
    let drv = drive(seed);
    let run_id = Nonce::from_words(seed, 24);
    let timeout = Duration::from_secs(20);
    // The facts of the export, as an agent opens it.
    let mut probe = dial::dial(&agent_for(&drv.uri), "host-a", &run_id, "test", timeout).unwrap();
    let info = probe.open(&drv.uri, None, 16, timeout).unwrap();
    probe.bye(timeout).unwrap();
    let facts = info.facts();
    let half = 16 << 20;
    let mut a = port_run(&d, "host-a", &facts, (0, half), seed, 0);
    let b = port_run(&d, "host-b", &facts, (half, 2 * half), seed + 1, 1);

    // Host B writes its share, cycle after cycle, until A is done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let b_thread = {
        let (uri, done, run_id) = (drv.uri.clone(), done.clone(), run_id.clone());
        let mut b = b;
        std::thread::spawn(move || {
            let mut s = dial::dial(&agent_for(&uri), "host-b", &run_id, "test", timeout).unwrap();
            s.open(&uri, Some(&b.run.history().header.target_identity.clone()), 16, timeout).unwrap();
            let mut cycles = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let req = b.request(None, 150);
                let sum = s
                    .run_cycle(req, &mut b.run.ledger, &mut || Err(ControllerError::from(Missing::NotOpen)), None, &policy(), None)
                    .unwrap();
                cycles.push(sum);
            }
            s.bye(timeout).unwrap();
            (b, cycles)
        })
    };

    let mut rng = faultline::rng::WyRand::new(seed);
    let (mut phases, mut lacked) = (std::collections::BTreeMap::<&str, u32>::new(), Vec::new());
    let cut = Some(faultline::writer::CutPlacement::AfterTime { after_ms: 120 });
    for k in 0..36u32 {
        let mut s = dial::dial(&agent_for(&drv.uri), "host-a", &run_id, "test", timeout).unwrap();
        let identity = a.run.history().header.target_identity.clone();
        s.open(&drv.uri, Some(&identity), 16, timeout).unwrap();
        // Killed up to 155 ms after the request of a cycle whose cut is due 120 ms into it and
        // takes 80 ms: before the cycle can have ended. (With a 40 ms cut the margin was 5 ms,
        // less than `kill` takes to start on a loaded 2-core machine: once in CI the cycle
        // had recorded its end, a cut, before the kill landed.)
        // Every sixth within 0.5 ms of the request: before or at the writer's first record.
        let delay = Duration::from_micros(if k % 6 == 0 { rng.below(500) } else { rng.below(155_000) });
        let pid = s.pid().to_string();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        });
        let req = a.request(cut, 2_000);
        let cycle = req.cycle;
        let cut_ran = std::cell::Cell::new(false);
        let r = s.run_cycle(
            req,
            &mut a.run.ledger,
            &mut || {
                cut_ran.set(true);
                std::thread::sleep(Duration::from_millis(80));
                Ok(())
            },
            None,
            &policy(),
            None,
        );
        killer.join().unwrap();
        let held = match r {
            Err(CycleError::Lost { source, held }) => {
                assert!(matches!(*source, DialError::Ended { .. }), "seed {seed} kill {k}: {source}");
                held
            }
            Ok(sum) => panic!("seed {seed} kill {k}: the cycle ended ({sum:?}) before its kill at {delay:?}"),
            Err(e) => panic!("seed {seed} kill {k}: {e}"),
        };
        let phase = if held.records == 0 {
            "before its first record"
        } else if cut_ran.get() {
            "during or after its cut"
        } else {
            "while it wrote"
        };
        *phases.entry(phase).or_default() += 1;
        let last = a.run.history().cycles.last().cloned();
        if held.records == 0 {
            // Killed before its writer's first record: the cycle was never begun, and the next
            // one takes its number.
            assert!(last.as_ref().is_none_or(|c| c.cycle < cycle), "seed {seed} kill {k}: {last:?}");
        } else {
            let c = last.expect("the cycle was begun");
            assert_eq!((c.cycle, c.end), (cycle, Some(faultline::ledger::EndKind::Interrupted)), "seed {seed} kill {k}");
        }
        let rep = a.verify(&drv.uri);
        assert!(rep.findings.is_empty(), "seed {seed} kill {k} at {delay:?} ({phase}, {held}): {:?}", rep.findings);
        // Uncertain writes of this cycle found whole on the drive.
        let mut bytes: std::collections::BTreeMap<u64, u64> = Default::default();
        let first_id = a.run.history().cycles.last().map_or(1, |c| if c.cycle == cycle { c.first_id } else { c.submitted_end });
        for r in rep.seen.iter().filter(|r| r.id >= first_id) {
            *bytes.entry(r.id).or_default() += r.end - r.start;
        }
        let whole = bytes.iter().filter(|(id, n)| **n == a.run.layout.plan(**id).len).count();
        lacked.push(whole);
        drop(s);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (b, b_cycles) = b_thread.join().unwrap();
    eprintln!("seed {seed}: kills by phase {phases:?}; host B ran {} cycles meanwhile", b_cycles.len());
    lacked.sort_unstable();
    let sum: usize = lacked.iter().sum();
    eprintln!(
        "acknowledged writes the coordinator lacked per kill (upper bound: uncertain writes found whole): median {}, max {}, mean {:.1}",
        lacked[lacked.len() / 2],
        lacked.last().unwrap(),
        sum as f64 / lacked.len() as f64
    );
    assert!(phases.len() >= 2 && phases.values().sum::<u32>() == 36, "seed {seed}: {phases:?}");
    assert!(!b_cycles.is_empty() && b_cycles.iter().all(|c| c.end == Some(faultline::ledger::EndKind::Graceful) && c.completed > 0));
    let rep = b.verify(&drv.uri);
    assert!(rep.findings.is_empty(), "seed {seed}: host B: {:?}", rep.findings);
    assert!(rep.durable_ok > 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// A host's clean shutdown: at its placement the agent stops submitting, lets every write
/// complete, flushes, and hands the coordinator what is durable before it asks for the cut;
/// the cut (here: SIGKILL of the agent, the host going down) then leaves the coordinator
/// lacking nothing. Its share verifies clean with no uncertain write of the cycle found whole
/// on the drive (the measure of the kills above, whose median is above 10), and the
/// coordinator held the writes it verified as owed.
#[test]
fn a_host_clean_shutdown_leaves_the_coordinator_holding_every_acknowledged_write() {
    let _alone = crate::common::alone(); // kill and cut timings within milliseconds
    use faultline::remote::coordinator::cycle::CycleError;
    let seed = 11;
    let OneAgent { d, drv, mut s, mut a, .. } = one_agent("shutdown", seed, 26);
    for k in 0..3u64 {
        let req = a.request(
            Some(faultline::writer::CutPlacement::Shutdown { after_ms: 100 + 40 * k, after_completions: 0, controller: false }),
            60_000,
        );
        let cycle = req.cycle;
        let pid = s.pid().to_string();
        let r = s.run_cycle(
            req,
            &mut a.run.ledger,
            &mut || {
                Command::new("kill").args(["-KILL", &pid]).status().unwrap();
                Ok(())
            },
            None,
            &policy(),
            None,
        );
        let held = match r {
            Err(CycleError::Lost { held, .. }) => held,
            other => panic!("seed {seed} shutdown {k}: the host went down at its cut, yet {other:?}"),
        };
        let c = a.run.history().cycles.last().cloned().unwrap();
        assert_eq!((c.cycle, c.end), (cycle, Some(faultline::ledger::EndKind::Interrupted)), "seed {seed} shutdown {k}");
        let rep = a.verify(&drv.uri);
        assert!(rep.findings.is_empty(), "seed {seed} shutdown {k} ({held}): {:?}", rep.findings);
        let whole: Vec<u64> =
            rep.seen.iter().filter(|r| r.id >= c.first_id && r.end - r.start == a.run.layout.plan(r.id).len).map(|r| r.id).collect();
        assert!(whole.is_empty(), "seed {seed} shutdown {k} ({held}): acknowledged writes the coordinator lacked: {whole:?}");
        assert!(held.durable_prefix > c.first_id + 10, "seed {seed} shutdown {k}: {held}");
        drop(s);
        s = dial::dial(&agent_for(&drv.uri), "host-a", &Nonce::from_words(seed, 26), "test", Duration::from_secs(20)).unwrap();
        s.open(&drv.uri, Some(&a.run.history().header.target_identity.clone()), 16, Duration::from_secs(20)).unwrap();
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A partition mid-cycle (the agent's process stopped: its transport stalls): the coordinator
/// waits no longer than its bound, closes the cycle from what it held, inconclusive (a
/// timeout, never a finding), and the share verifies clean. A stop token ends a cycle
/// gracefully on the agent, as a surviving port's writer is ended when its window is over.
#[test]
fn a_partition_mid_cycle_is_a_bounded_inconclusive_close_and_a_stop_ends_a_cycle_gracefully() {
    let _alone = crate::common::alone(); // kill and cut timings within milliseconds
    use faultline::remote::coordinator::cycle::{CycleError, StreamPolicy};
    let seed = 7;
    let OneAgent { d, drv, mut s, mut a, .. } = one_agent("partition", seed, 25);
    // Stopped from outside after 200 ms of a 60 s cycle: it ends gracefully, all durable.
    let stop = faultline::writer::StopToken::default();
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            stop.stop();
        })
    };
    let t0 = Instant::now();
    // With its completions streamed: each write's, once, in the order of its clock.
    let mut req = a.request(None, 60_000);
    req.samples = true;
    let mut got: Vec<faultline::writer::WireSample> = Vec::new();
    let mut take = |b: &[faultline::writer::WireSample]| got.extend_from_slice(b);
    let sum = s
        .run_cycle(req, &mut a.run.ledger, &mut || Err(ControllerError::from(Missing::NotOpen)), Some(&stop), &policy(), Some(&mut take))
        .unwrap();
    stopper.join().unwrap();
    assert_eq!(got.len() as u64, sum.completed + sum.failed, "{sum:?}");
    assert_eq!(got.iter().map(|x| x[2]).sum::<u64>(), sum.bytes_written, "{sum:?}");
    let (first, last) = (got.iter().map(|x| x[0]).min().unwrap(), got.iter().map(|x| x[0]).max().unwrap());
    assert!(first >= sum.started_ns && last - sum.started_ns <= sum.elapsed_ns, "{first} {last} {sum:?}");
    assert_eq!(sum.end, Some(faultline::ledger::EndKind::Graceful), "{sum:?}");
    // With samples, how late the agent's host let it run, on the agent's clock, in the cycle.
    let end = sum.started_ns + sum.elapsed_ns + 5_000_000;
    assert!(!sum.late.is_empty() && sum.late.iter().all(|&[t, us]| t >= sum.started_ns && t <= end && us > 0), "{:?}", sum.late);
    assert!(t0.elapsed() < Duration::from_secs(30) && sum.completed > 0, "{:?} {sum:?}", t0.elapsed());
    let c = a.run.history().cycles.last().unwrap().clone();
    assert_eq!((c.durable_prefix, c.submitted_end), (sum.submitted_end, sum.submitted_end), "every write of a graceful cycle is durable");

    // The partition: SIGSTOP 100 ms into the next cycle.
    let pid = s.pid().to_string();
    let stopper = {
        let pid = pid.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        })
    };
    let mut req = a.request(None, 60_000);
    req.drain_timeout_ms = 500;
    let silence = Duration::from_millis(700);
    let p = StreamPolicy { ledger_checkpoint_every: Duration::from_millis(500), silence };
    let t0 = Instant::now();
    let e = s.run_cycle(req, &mut a.run.ledger, &mut || Err(ControllerError::from(Missing::NotOpen)), None, &p, None).unwrap_err();
    let waited = t0.elapsed();
    stopper.join().unwrap();
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    match &e {
        CycleError::Lost { source, held } => {
            assert!(matches!(**source, DialError::Timeout { .. }) && e.to_string().contains("inconclusive"), "{e}");
            assert!(held.records > 2, "checkpoints were heard before the stall: {held}");
        }
        other => panic!("{other}"),
    }
    // The bound: silence plus the agent's drain, from the last frame heard (~100 ms in).
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let c = a.run.history().cycles.last().unwrap().clone();
    assert_eq!(c.end, Some(faultline::ledger::EndKind::Interrupted));
    let rep = a.verify(&drv.uri);
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
    let _ = std::fs::remove_dir_all(&d);
}

/// Verify through the agent: its copy of the history comes from the coordinator's ledger
/// file, and what it finds, sees and digests is what a verify of the same regions through the
/// coordinator's own connection finds, sees and digests, on a clean share and after sectors
/// of a durable write are zeroed behind the run's back (a lost write, found alike).
#[test]
fn a_verify_through_the_agent_agrees_with_a_local_one_finding_for_finding_and_digest_for_digest() {
    let seed = 11;
    let OneAgent { d, drv, mut s, mut a, timeout } = one_agent("verify", seed, 26);
    let audit = std::sync::Arc::new(std::sync::Mutex::new(Vec::<dial::Sent>::new()));
    let kept = audit.clone();
    s.set_audit(Box::new(move |e| kept.lock().unwrap().push(e.clone())));
    let cut = Some(faultline::writer::CutPlacement::AfterTime { after_ms: 100 });
    for _ in 0..2 {
        s.run_cycle(a.request(cut, 1_000), &mut a.run.ledger, &mut || Ok(()), None, &policy(), None).unwrap();
    }
    a.run.ledger.sync().unwrap();
    let ledger = d.join("host-a").join(faultline::ledger::LEDGER_FILE);
    let regions = [(0u64, 4u64 << 20), (8 << 20, 16 << 20)];
    let compare = |s: &mut dial::Session, a: &PortRun| {
        let held = s.sync_history((faultline::port::PortId(0), &ledger), timeout).unwrap();
        assert_eq!(held, a.run.history().records);
        let (remote, rd) = s.verify((faultline::port::PortId(0), &regions), true, timeout).unwrap();
        let spec = faultline_drivers::OpenSpec {
            writable: false,
            queue_depth: 16,
            expect: Default::default(),
            allow_overwrite_signature: true,
            io_threads: 1,
        };
        let mut t = faultline_drivers::open_target(Path::new(&drv.uri), &spec).unwrap().target;
        let v = faultline::verify::Verifier::new(&a.run.layout, a.run.history(), &a.run.format);
        let mut dg = faultline::verify::Digests::for_regions(&regions);
        let local = v.verify_regions_digested(t.as_mut(), &regions, &mut dg).unwrap();
        assert_eq!(
            (remote.sectors, remote.durable_ok, remote.newer_ok, remote.prior_ok),
            (local.sectors, local.durable_ok, local.newer_ok, local.prior_ok)
        );
        assert_eq!(remote.findings, local.findings);
        assert_eq!(remote.seen, local.seen);
        assert_eq!(rd.unwrap(), dg.finish());
        remote
    };
    let clean = compare(&mut s, &a);
    assert!(clean.findings.is_empty() && clean.durable_ok > 0, "{:?}", clean.findings);
    // A third cycle: the agent's copy of the history catches up from where it was.
    s.run_cycle(a.request(None, 300), &mut a.run.ledger, &mut || Ok(()), None, &policy(), None).unwrap();
    a.run.ledger.sync().unwrap();
    // A durable write, still current, zeroed behind the run's back.
    let h = a.run.history();
    let id = h
        .cycles
        .iter()
        .rev()
        .flat_map(|c| c.first_id..c.durable_prefix)
        .find(|id| {
            let p = a.run.layout.plan(*id);
            p.offset < 4 << 20 && a.run.layout.latest_covering(p.offset, h.submitted_end()).map(|w| w.id) == Some(*id)
        })
        .expect("a durable write still current in the first region");
    let p = a.run.layout.plan(id);
    let spec = faultline_drivers::OpenSpec {
        writable: true,
        queue_depth: 4,
        expect: Default::default(),
        allow_overwrite_signature: true,
        io_threads: 1,
    };
    let mut t = faultline_drivers::open_target(Path::new(&drv.uri), &spec).unwrap().target;
    let buf = faultline_drivers::AlignedBuf::zeroed(4096);
    t.submit(faultline_drivers::Op::Write { token: 1, offset: p.offset, buf, fua: true, write_id: 0 }).unwrap();
    let mut done = Vec::new();
    t.reap(&mut done, 1, timeout).unwrap();
    assert!(done.len() == 1 && done[0].result.is_ok(), "{done:?}");
    drop(t);
    let lost = compare(&mut s, &a);
    assert!(
        lost.findings.iter().any(|f| f.offset <= p.offset && p.offset < f.offset + f.length),
        "write {id} at {} zeroed, not found: {:?}",
        p.offset,
        lost.findings
    );
    // Released, the target answers nothing; waited for, it is opened again and answers.
    assert_eq!(s.probe(0, timeout).unwrap(), Ok(()));
    s.release(timeout).unwrap();
    assert!(s.probe(0, timeout).unwrap().unwrap_err().0.contains("no target is open"));
    let (enumerate, first_read) = s.wait_ready(4096, Duration::from_secs(10), timeout).unwrap();
    assert!(enumerate.is_some() && first_read < Duration::from_secs(2), "{enumerate:?} {first_read:?}");
    assert_eq!(s.probe(0, timeout).unwrap(), Ok(()));
    // Every operation sent is in the audit log, in order, with its request number.
    let log: Vec<String> = audit.lock().unwrap().iter().map(|e| format!("{} {}", e.seq, e.what)).collect();
    let want = [
        "2 cycle 1 first id 1 port A cut Some",
        "3 cycle 2 first id",
        "4 history",
        "5 verify 2 regions of share A digest true",
        "durable up to record",
    ];
    for want in want.into_iter().chain(["cut done", "release", "wait ready at 4096"]) {
        assert!(log.iter().any(|l| l.contains(want)), "{want:?} not in the audit log: {log:#?}");
    }
    assert!(audit.lock().unwrap().windows(2).all(|w| w[0].t_ns <= w[1].t_ns && w[0].host == "host-a"));
    s.bye(timeout).unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// A port on another host through the runner's `Dut` seam (`RemoteDut`): a cycle with a cut,
/// a verify with digests and sector hashes that agree with this process's own reading, no
/// health logs for an NBD export; then the host killed mid-cycle: the cycle fails as the
/// device gone, the ledger closes it as interrupted, and `wait_ready` dials the host again
/// (it has "booted"), opens the target held to the run's identity, and the run goes on clean.
#[test]
fn a_remote_dut_runs_verifies_loses_its_host_and_dials_it_again() {
    use faultline::remote::coordinator::dut::{RemoteDut, RemotePort};
    use faultline::runner::dut::{Dut, DutCycleError, DutError, VerifyRequest, Workload};
    let seed = 13;
    let d = scratch("remote-dut");
    let drv = drive(seed);
    let timeout = Duration::from_secs(20);
    std::fs::create_dir_all(d.join("host-a")).unwrap();
    // The agent's binary, which the test takes away to make the host unreachable.
    let agent_bin = d.join("faultline-agent");
    std::fs::copy(BIN, &agent_bin).unwrap();
    let transport =
        Transport::new(&[agent_bin.display().to_string(), "agent".into(), "--stdio".into(), "--target".into(), drv.uri.clone()], "host-a")
            .unwrap();
    let port = RemotePort {
        host: "host-a".into(),
        transport,
        run: Nonce::from_words(seed, 27),
        coordinator: "test".into(),
        target: drv.uri.clone(),
        expect: faultline_drivers::blockdev::Expectation { size_bytes: Some(64 << 20), ..Default::default() },
        queue_depth: 16,
        timeout,
        stream_every: Duration::from_millis(STREAM_EVERY_MS),
        policy: policy(),
        resets: Vec::new(),
    };
    // The scenario's pinned identity goes with the open: a device that is not it is refused.
    let wrong =
        RemotePort { expect: faultline_drivers::blockdev::Expectation { size_bytes: Some(1 << 30), ..Default::default() }, ..port.clone() };
    let e = RemoteDut::open(wrong).err().expect("a 64 MiB export is not a 1 GiB drive").to_string();
    assert!(e.contains("size is 67108864 bytes, expected 1073741824"), "{e}");
    let mut dut = RemoteDut::open(port).unwrap();
    let facts = dut.facts().unwrap();
    assert!(dut.notes().iter().any(|n| n.contains("host-a: agent faultline") && n.contains("clock offset")));
    let mut a = port_run(&d, "host-a", &facts, (0, 16 << 20), seed, 0);
    dut.bind(a.run.history().header.target_identity.clone());
    let options = |a: &PortRun, cut| {
        let (cycle, first_id) = a.run.next_cycle();
        faultline::writer::CycleOptions {
            cycle,
            first_id,
            started_at: "2026-12-05T00:00:00Z".into(),
            port: a.port,
            max_writes: None,
            duration: Some(Duration::from_millis(1_000)),
            cut,
            checkpoint_every: Duration::from_millis(1),
            drain_timeout: Duration::from_secs(5),
            stop: None,
            samples: None,
            fill: faultline::writer::Fill::Auto,
            clock_from: None,
            before_end: None,
        }
    };
    let cut = Some(faultline::writer::CutPlacement::AfterTime { after_ms: 100 });
    // The port's completions join a dual-port run's windows, on this host's clock.
    let windows = std::sync::Arc::new(faultline::writer::Windows::new(1));
    let o = faultline::writer::CycleOptions { samples: Some(faultline::writer::PortSamples::slot(&windows, 0)), ..options(&a, cut) };
    let w = Workload { layout: &a.run.layout, format: &a.run.format, contract: faultline::ledger::Contract::Plp, opts: &o };
    let cuts = std::cell::Cell::new(0);
    let out = dut
        .run_cycle(&w, &mut a.run.ledger, &mut || {
            cuts.set(cuts.get() + 1);
            Ok(())
        })
        .unwrap();
    assert_eq!((out.end, cuts.get()), (Some(faultline::ledger::EndKind::Cut), 1), "{out:?}");
    assert!(out.completed > 0 && out.cut_at.is_some());
    let f = windows.figures(0, faultline::writer::Phase::Warmup, Instant::now()).unwrap();
    assert_eq!((f.completions, f.bytes), (out.completed, out.bytes_written), "every completion the agent's writer counted: {f:?}");
    let series = windows.series(0);
    assert_eq!(series.iter().map(|b| u64::from(b.completions)).sum::<u64>(), out.completed);
    // Mapped onto this host's clock: inside the windows' lifetime, not before their epoch.
    let spanned = faultline::writer::windows::BUCKET * series.len() as u32;
    assert!(spanned <= windows.epoch().elapsed() + faultline::writer::windows::BUCKET, "{spanned:?}");
    a.run.ledger.sync().unwrap();
    let regions = [(0u64, 16u64 << 20)];
    let ledger = d.join("host-a").join(faultline::ledger::LEDGER_FILE);
    let check = |dut: &mut RemoteDut, a: &PortRun| {
        let v = faultline::verify::Verifier::new(&a.run.layout, a.run.history(), &a.run.format);
        let share = (faultline::port::PortId(0), ledger.as_path());
        let reply = dut.verify(&VerifyRequest { verifier: &v, regions: &regions, digest: true, share }).unwrap();
        assert!(reply.report.findings.is_empty() && reply.report.durable_ok > 0, "{:?}", reply.report.findings);
        assert_eq!(reply.report.seen, a.verify(&drv.uri).seen);
        assert!(reply.digests.is_some_and(|d| !d.is_empty()));
    };
    check(&mut dut, &a);
    let hashes = dut.sector_hashes(&[(0, 8192), (1 << 20, (1 << 20) + 4096)], 512).unwrap();
    assert_eq!(hashes.len(), 24);
    let spec = faultline_drivers::OpenSpec {
        writable: false,
        queue_depth: 4,
        expect: Default::default(),
        allow_overwrite_signature: true,
        io_threads: 1,
    };
    let mut t = faultline_drivers::open_target(Path::new(&drv.uri), &spec).unwrap().target;
    let mut buf = faultline_drivers::AlignedBuf::zeroed(8192);
    t.read_at(0, &mut buf).unwrap();
    assert_eq!(hashes[0], Some(*blake3::hash(&buf[..512]).as_bytes()));
    assert!(dut.health().is_none(), "an NBD export has no health logs");

    // The host dies 80 ms into the next cycle.
    let pid = dut.transport_pid().unwrap().to_string();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(80));
        Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    });
    let o = options(&a, None);
    let w = Workload { layout: &a.run.layout, format: &a.run.format, contract: faultline::ledger::Contract::Plp, opts: &o };
    let e = dut.run_cycle(&w, &mut a.run.ledger, &mut || Ok(())).unwrap_err();
    killer.join().unwrap();
    // Lost before any cut: the runner calls it an error (no fault fired); the coordinator closed
    // the cycle from what it held, and says what that was.
    match &e {
        DutCycleError::HostLost { outcome, why } => {
            assert!(why.starts_with("host-a lost before its writer reached the cut") && why.contains("records heard"), "{why}");
            assert_eq!(outcome.end, Some(faultline::ledger::EndKind::Interrupted));
            assert!(outcome.completed > 0 && outcome.bytes_written > 0, "{outcome:?}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(a.run.history().cycles.last().unwrap().end, Some(faultline::ledger::EndKind::Interrupted));
    assert!(!dut.answers(0));
    // A host that does not come back within the timeout: inconclusive, never a finding (the
    // runner does not call it a dead device).
    std::fs::rename(&agent_bin, d.join("away")).unwrap();
    let e = dut.wait_ready(0, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, DutError::HostGone { .. }) && e.to_string().contains("host-a: its agent did not answer within 1 s"), "{e}");
    std::fs::rename(d.join("away"), &agent_bin).unwrap();
    let r = dut.wait_ready(0, Duration::from_secs(20)).unwrap();
    assert!(r.enumerate.is_some(), "{r:?}");
    assert!(dut.answers(0));
    check(&mut dut, &a);
    let o = options(&a, cut);
    let w = Workload { layout: &a.run.layout, format: &a.run.format, contract: faultline::ledger::Contract::Plp, opts: &o };
    assert_eq!(dut.run_cycle(&w, &mut a.run.ledger, &mut || Ok(())).unwrap().end, Some(faultline::ledger::EndKind::Cut));
    a.run.ledger.sync().unwrap();
    check(&mut dut, &a);
    let _ = std::fs::remove_dir_all(&d);
}
