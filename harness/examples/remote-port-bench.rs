//! What the agent protocol costs per write: one port's cycle written by this process (a local
//! port) against the same cycle written by `faultline agent --stdio` in a child process whose
//! ledger is this process's over the protocol (a remote port), on one simulated drive served
//! over NBD on a Unix socket (`faultline_fixtures::nbd`, a completion every `--service-us`,
//! default 0: the harness, not the drive, is the limit). Both sides use faultline's NBD client,
//! the same workload and the same queue depth; the rounds alternate, and the ratio is
//! remote/local writes per second, per round and as the median.
//!
//! Run with `cargo build --release -p faultline --bin faultline && cargo run --release -p
//! faultline --example remote-port-bench [-- --seconds S --rounds N --stream-every-ms M]`. The
//! agent is the `faultline` binary beside this example's directory (target/release/).

use faultline::ledger::{Contract, RunHeader, TargetFacts};
use faultline::port::{PortEntry, PortId};
use faultline::remote::coordinator::cycle::StreamPolicy;
use faultline::remote::coordinator::session::{self as dial, Transport};
use faultline::remote::proto::{CycleRequest, Nonce};
use faultline::run::{open_run, DeviceFacts, OpenRun};
use faultline::workload::{FlushPolicy, Pattern, WorkloadSpec};
use faultline::writer::{run_cycle, CycleOptions, Fill};
use faultline_drivers::{open_target, OpenSpec};
use faultline_fixtures::nbd::{NbdConfig, NbdServer};
use faultline_fixtures::{SimConfig, SimDrive, TruthContract};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map_or(default, |v| v.parse().expect(name))
}

fn run(dir: &Path, facts: &DeviceFacts, span: u64) -> OpenRun {
    let spec = WorkloadSpec {
        seed: 9,
        pattern: Pattern::Random {},
        span_start: 0,
        span_end: span,
        min_write_bytes: 4096,
        max_write_bytes: 4096,
        mean_write_bytes: 4096,
        align_bytes: 4096,
        queue_depth: 32,
        flush: FlushPolicy { every_writes: None, every_ms: None, fua_percent: 0 },
        ops: Default::default(),
    };
    let t = TargetFacts {
        identity: facts.identity.clone(),
        capacity: facts.capacity_bytes,
        sector_bytes: 512,
        atomic_bytes: 4096,
        dealloc_reads: Default::default(),
    };
    open_run(dir, facts, || RunHeader::new(1, "bench".into(), t, Contract::Plp, PortEntry::single(), spec)).expect("open the run")
}

fn main() {
    let seconds = arg("--seconds", 2);
    let rounds = arg("--rounds", 3);
    let stream_every_ms = arg("--stream-every-ms", 1);
    let service_us = arg("--service-us", 0);
    let me = std::env::current_exe().expect("this example's path");
    let bin: PathBuf = me.parent().and_then(Path::parent).map(|d| d.join("faultline")).expect("target directory");
    assert!(bin.is_file(), "{} is missing: cargo build --release -p faultline --bin faultline", bin.display());
    let dir = std::env::temp_dir().join(format!("faultline-remote-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let span = 256u64 << 20;
    let cfg = SimConfig {
        capacity_bytes: span,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 64,
        seed: 1,
        model: faultline::scenario::SimModel::HonestPlp.fault_model(),
        contract: TruthContract::Plp,
        dealloc_reads: Default::default(),
    };
    let nbd = NbdConfig { export_name: "sim".into(), description: "bench".into(), service_time: Duration::from_micros(service_us) };
    let mut server = NbdServer::start(SimDrive::new(cfg), Box::new(faultline::format::claimed_write_id), nbd);
    let sock = dir.join("nbd.sock");
    server.listen_unix(&sock).unwrap();
    let uri = format!("nbd+unix:///sim?socket={}", sock.display());
    let spec = OpenSpec { writable: true, queue_depth: 32, expect: Default::default(), allow_overwrite_signature: true, io_threads: 1 };
    let mut local = open_target(Path::new(&uri), &spec).unwrap().target;
    let facts = DeviceFacts::of(local.as_ref());
    let mut l = run(&dir.join("local"), &facts, span);
    let mut r = run(&dir.join("remote"), &facts, span);
    let transport =
        Transport::new(&[bin.display().to_string(), "agent".into(), "--stdio".into(), "--target".into(), uri.clone()], "local").unwrap();
    let timeout = Duration::from_secs(20);
    let mut s = dial::dial(&transport, "local", &Nonce::from_words(1, 2), "bench", timeout).unwrap();
    s.open(&uri, Some(&facts.identity), 32, timeout).unwrap();
    let policy = StreamPolicy { ledger_checkpoint_every: Duration::from_millis(500), silence: Duration::from_secs(10) };
    println!(
        "one port, 4 KiB random writes at queue depth 32, {seconds} s a cycle, a completion every {service_us} us, the agent streaming every {stream_every_ms} ms"
    );
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let (cycle, first_id) = l.next_cycle();
        let opts = CycleOptions {
            cycle,
            first_id,
            started_at: "bench".into(),
            port: PortId::A,
            max_writes: None,
            duration: Some(Duration::from_secs(seconds)),
            cut: None,
            checkpoint_every: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
            stop: None,
            samples: None,
            fill: Fill::Auto,
            clock_from: None,
            before_end: None,
        };
        let t = Instant::now();
        let out = run_cycle(local.as_mut(), &l.layout, &l.format, &mut l.ledger, Contract::Plp, &opts, &mut || Ok(())).unwrap();
        let local_rate = out.completed as f64 / t.elapsed().as_secs_f64();
        let (cycle, first_id) = r.next_cycle();
        let req = CycleRequest {
            header: r.history().header.clone(),
            cycle,
            first_id,
            started_at: "bench".into(),
            port: PortId::A,
            max_writes: None,
            duration_ms: Some(seconds * 1000),
            cut: None,
            stream_every_ms,
            drain_timeout_ms: 10_000,
            samples: false,
            reset: None,
        };
        let t = Instant::now();
        let sum = s.run_cycle(req, &mut r.ledger, &mut || Ok(()), None, &policy, None).unwrap();
        let remote_rate = sum.completed as f64 / t.elapsed().as_secs_f64();
        let ratio = remote_rate / local_rate;
        ratios.push(ratio);
        println!("round {round}: local {local_rate:>9.0} writes/s, remote {remote_rate:>9.0} writes/s, remote/local {ratio:.3}");
    }
    ratios.sort_by(f64::total_cmp);
    println!("median remote/local: {:.3}", ratios[ratios.len() / 2]);
    s.bye(timeout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
