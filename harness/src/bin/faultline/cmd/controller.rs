//! `faultline controller`: bring-up of power and link controllers, so a lab engineer can check
//! the wiring before a soak. `list` shows what is plugged in; `SPEC ACTION` talks to one
//! controller and prints what came back. Exit codes: 0 ok, 2 error.

use crate::exit::Exit;
use anyhow::{anyhow, bail, Result};
use clap::{Parser, ValueEnum};
use faultline_drivers::control::{self, parse_spec, ControlEnv, ControllerSpec};
use faultline_drivers::{LinkController, PowerSwitch};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Ask the controller what it is.
    Identify,
    /// Capabilities and, where the hardware can tell, the output state.
    Status,
    On,
    Off,
    /// Off, wait --off-ms, on (power switches); one reset (link controllers, or --port).
    Cycle,
}

#[derive(Parser)]
pub struct ControllerArgs {
    /// `list`, or a controller spec such as quarch+tcp://HOST, lcus+serial:///dev/ttyUSB0?channel=1,
    /// nvme-reset://nvme0, exec:?off=CMD&on=CMD, manual, sim (a malformed spec prints every form).
    spec: String,
    /// What to do (not with `list`).
    #[arg(value_enum)]
    action: Option<Action>,
    /// How long `cycle` keeps the power off (or the link down).
    #[arg(long, default_value_t = 3000)]
    off_ms: u64,
    /// Timeout of one command exchange with the device.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// Link controllers: the port to reset with `cycle` (default: the only one). On a Quarch
    /// hot-plug module, `--port A` or `--port B` pulls that port instead of cutting power.
    #[arg(long)]
    port: Option<String>,
}

pub fn cmd_controller(a: ControllerArgs) -> Result<Exit> {
    if a.spec == "list" {
        if a.action.is_some() {
            bail!("`controller list` takes no action");
        }
        return list();
    }
    let spec = parse_spec(&a.spec)?;
    let action = a.action.ok_or_else(|| anyhow!("missing action: identify, status, on, off or cycle"))?;
    let env = ControlEnv { timeout: Duration::from_millis(a.timeout_ms), ..ControlEnv::default() };
    let mut c = if spec == ControllerSpec::Sim {
        println!("sim: a fresh simulated drive in this process (its state does not persist between invocations)");
        let drive = SimDrive::new(SimConfig {
            capacity_bytes: 8 << 20,
            sector_bytes: 512,
            atomic_bytes: 4096,
            queue_depth: 32,
            seed: 0,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
            dealloc_reads: Default::default(),
        });
        control::Controller { power: Some(Box::new(drive.power())), link: None }
    } else {
        control::open(&spec, &env)?
    };
    let r = run(&mut c, action, &a);
    if let Some(p) = c.power.as_mut() {
        for entry in p.take_log() {
            println!("{}", entry.trim_end());
        }
    }
    r?;
    Ok(Exit::Clean)
}

fn run(c: &mut control::Controller, action: Action, a: &ControllerArgs) -> Result<()> {
    let off = Duration::from_millis(a.off_ms);
    // A named port means the link side, even on a controller that is also a switch.
    if a.port.is_some() || c.power.is_none() {
        let link = c.link.as_mut().ok_or_else(|| anyhow!("this controller has no link ports (it is a power switch only)"))?;
        return run_link(link.as_mut(), action, a.port.as_deref(), off);
    }
    let p = c.power.as_mut().expect("checked above");
    let caps = p.capabilities();
    match action {
        Action::Identify => println!("{}", p.identify()?),
        Action::Status => {
            println!("controller: {}", p.name());
            println!(
                "capabilities: state readback {}, voltage readback {}, acknowledges commands {}",
                yes(caps.state_readback),
                yes(caps.voltage_readback),
                yes(caps.acknowledges)
            );
            if !caps.confirms_cut() {
                println!("note: this switch cannot confirm a cut; a cycle runner confirms it by the device disappearing");
            }
            print_state(p.as_mut())?;
            if let Some(l) = c.link.as_ref() {
                print_ports(l.as_ref());
            }
        }
        Action::On => {
            p.power_on()?;
            print_state(p.as_mut())?;
        }
        Action::Off => {
            p.power_off()?;
            print_state(p.as_mut())?;
        }
        Action::Cycle => {
            let t = Instant::now();
            p.power_off()?;
            println!("off after {:.3} s", t.elapsed().as_secs_f64());
            print_state(p.as_mut())?;
            std::thread::sleep(off);
            let t = Instant::now();
            p.power_on()?;
            println!("on after {:.3} s", t.elapsed().as_secs_f64());
            print_state(p.as_mut())?;
        }
    }
    Ok(())
}

fn run_link(l: &mut (dyn LinkController + Send), action: Action, port: Option<&str>, hold: Duration) -> Result<()> {
    match action {
        Action::Identify | Action::Status => {
            println!("controller: {}", l.name());
            print_ports(l);
            // What the controller could not tell when opened (a CAP register it cannot read).
            for line in l.take_log() {
                println!("note: {line}");
            }
            Ok(())
        }
        Action::On | Action::Off => bail!("{} is a link controller: it has no on/off, only `cycle` (one reset)", l.name()),
        Action::Cycle => {
            let ports = l.ports();
            let p = match port {
                Some(p) => ports.iter().find(|x| x.port == p).ok_or_else(|| anyhow!("{} has no port {p:?}", l.name()))?,
                None if ports.len() == 1 => &ports[0],
                None => bail!("{} has several ports; choose one with --port", l.name()),
            };
            let kind = *p.kinds.first().ok_or_else(|| anyhow!("port {} supports no reset", p.port))?;
            let name = p.port.clone();
            let t = Instant::now();
            l.reset(&name, kind, hold)?;
            println!("{kind} on {name}: done in {:.3} s", t.elapsed().as_secs_f64());
            for line in l.take_log() {
                println!("note: {line}");
            }
            Ok(())
        }
    }
}

fn print_state(p: &mut (dyn PowerSwitch + Send)) -> Result<()> {
    if p.capabilities().state_readback {
        println!("state: {}", p.state()?);
    } else {
        println!("state: not readable from this switch");
    }
    Ok(())
}

fn print_ports(l: &dyn LinkController) {
    for p in l.ports() {
        println!("port {}: {}", p.port, p.kinds.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", "));
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn list() -> Result<Exit> {
    println!("serial ports:");
    match control::list_serial_ports() {
        Ok(ports) if ports.is_empty() => println!("  (none)"),
        Ok(ports) => {
            for p in ports {
                println!("  {}", p);
            }
        }
        Err(e) => println!("  cannot list: {e}"),
    }
    println!("USB controllers:");
    match control::usb::list_controllers() {
        Ok(devs) if devs.is_empty() => println!("  (none)"),
        Ok(devs) => {
            for d in devs {
                if let Some(id) = &d.board_id {
                    println!(
                        "  {:04x}:{:04x} bus {} address {}  {}  board id {id}  -> {}://{id}?relay=N",
                        d.vid,
                        d.pid,
                        d.bus,
                        d.address,
                        d.product.as_deref().unwrap_or("?"),
                        d.kind,
                    );
                    continue;
                }
                println!(
                    "  {:04x}:{:04x} bus {} address {}  {}  serial {}  -> {}://{}",
                    d.vid,
                    d.pid,
                    d.bus,
                    d.address,
                    d.product.as_deref().unwrap_or("?"),
                    d.serial.as_deref().unwrap_or("? (no read access)"),
                    d.kind,
                    if d.kind.ends_with("+usb") { d.serial.as_deref().unwrap_or("SERIAL") } else { "(see serial ports)" },
                );
            }
        }
        Err(e) => println!("  cannot list: {e}"),
    }
    Ok(Exit::Clean)
}
