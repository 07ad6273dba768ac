//! `lab run`, `lab exec` and `lab shell`: a machine prepared and booted by the library
//! (`faultline::lab::session`), what it did printed, and the exit code chosen.

use anyhow::{bail, Context, Result};
use faultline::lab::guest::lab_scenario;
use faultline::lab::machine::{console_tail, Outcome};
use faultline::lab::reconcile::Reconciled;
use faultline::lab::session::{self, MachineOpts, Prepared, SimFromScenario};
use faultline::scenario::{origin_with, OnOff, Scenario};
use faultline_fixtures::TruthContract;
use std::path::Path;

use super::args::{take_needs, ExecArgs, MachineArgs, RunArgs};
use crate::exit::Exit;

/// Prepares the machine, saying so when the guest's faultline binary was refreshed.
fn prepare(m: &MachineArgs, name: &str, from: SimFromScenario) -> Result<(MachineOpts, Prepared)> {
    let opts = m.opts(name)?;
    let p = session::prepare(&opts, from)?;
    if p.refreshed {
        println!("lab: the guest's faultline binary refreshed");
    }
    Ok((opts, p))
}

/// Boots the machine (`echo`: the guest command's output on stdout as it comes) and says how
/// long it took.
fn boot(p: &mut Prepared, opts: &MachineOpts, shell: bool, echo: bool) -> Result<Outcome> {
    let mut stdout = std::io::stdout();
    let out = p.boot(opts, shell, if echo { Some(&mut stdout) } else { None })?;
    let boot = out.boot_s.map_or("?".to_string(), |b| format!("{b:.1}"));
    eprintln!("lab: booted in {boot} s, powered off after {:.1} s (console: {})", out.total_s, p.console().display());
    Ok(out)
}

/// The scenario `a` names, overrides applied, its `[lab]` needs taken and its faults checked
/// against the lab's rig, before anything boots.
fn load(a: &mut RunArgs) -> Result<(Scenario, Scenario, Vec<faultline::scenario::Override>)> {
    let sets = super::super::run::overrides(a.cycles, &a.set);
    let given = Scenario::load_with(&a.scenario, &sets)?;
    take_needs(&a.scenario, &given, &mut a.m)?;
    let origin = a.scenario.display().to_string();
    let s = lab_scenario(given.clone(), &origin, Path::new("/dev/nvme0n1"))?;
    session::check_rig(&s, &origin, a.m.sim.is_some(), a.m.usb.map(Into::into))?;
    Ok((given, s, sets))
}

pub(super) fn cmd_run(mut a: RunArgs) -> Result<Exit> {
    // Checked on the host first, so a bad file fails before the boot.
    let (given, s, sets) = load(&mut a)?;
    let contract = match s.contract {
        faultline::ledger::Contract::Plp => TruthContract::Plp,
        faultline::ledger::Contract::Flush => TruthContract::Flush,
    };
    let name = a.scenario.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let seed = s.seed.unwrap_or(1);
    // A workload that deallocates or writes zeroes: the drive names those by the workload's
    // ids, so the guest runs it with the drive's seed (pinned into the share's copy).
    let zeroes = !s.workload.ops.mix().unwrap_or_default().writes_only() && a.m.sim.is_some();
    let mut given = given;
    if zeroes && given.seed.is_none() {
        given.seed = Some(seed);
        println!("lab run: the guest runs with seed {seed}, the drive's: the drive names each trim and write zeroes by the workload's id");
    }
    let workload = zeroes.then(|| s.workload_spec(a.m.size_mib << 20, seed));
    let from = SimFromScenario { contract, atomic: s.target.atomic_bytes.unwrap_or(512), seed, workload };
    let (opts, mut p) = prepare(&a.m, &name, from)?;
    // The scenario as given, overrides applied: the guest puts the lab's drive in [target].
    let text = format!("# {} (the lab's copy)\n{}", origin_with(&a.scenario.display().to_string(), &sets), given.to_toml()?);
    std::fs::write(p.share.join("scenario.toml"), text).with_context(|| format!("cannot copy {} into the share", a.scenario.display()))?;
    let truth = if p.sim.is_some() { " --truth" } else { "" };
    let usb_fault = opts.usb_fault.as_deref();
    p.write_cmd(&format!("{}faultline lab guest run{truth} /share/scenario.toml /share/run\n", session::preamble(opts.usb, usb_fault)))?;
    let drive = p.sim.as_ref().map_or(String::new(), |s| format!(", simulated drive {}", s.model));
    let multipath = if opts.multipath { OnOff::On } else { OnOff::Off };
    println!("lab run: {} in {} (multipath {multipath}{drive})", a.scenario.display(), p.dir.display());
    let out = boot(&mut p, &opts, false, true)?;
    session::bring_back(&p.share.join("run"), &p.dir)?;
    let Some(code) = out.exit_code else {
        bail!(
            "the guest powered off without faultline's exit code (see {}); the console's last lines:\n{}",
            p.share.join("lab/guest.log").display(),
            console_tail(&p.console(), 30)
        )
    };
    if let Some(sim) = &p.sim {
        let r = sim.reconcile(&p.share.join("lab/checks.jsonl"), &p.lab_dir, &p.dir)?;
        println!("{}", sim.traffic());
        verdict(&r, &p.lab_dir.join("reconcile.json"))?;
    }
    Ok(Exit::from_code(u8::try_from(code).unwrap_or(2)))
}

/// What the reconciliation says: its table, the findings explained, and an error (the lab
/// failed, exit 2) when a cycle was the lab's fault or the guest and the truth disagree.
fn verdict(r: &Reconciled, json: &Path) -> Result<()> {
    print!("{}", r.table());
    for e in &r.explained {
        println!("lab: a finding about the layer between faultline and the drive, not about the drive: {e} (docs/LAB.md)");
    }
    if !r.lab_faults.is_empty() {
        bail!(
            "the lab failed in {} of {} cycles, so this run says nothing of the drive ({}; run it again, and see \
             docs/LAB.md for this QEMU defect):\n  {}{}",
            r.lab_faults.len(),
            r.cycles,
            json.display(),
            r.lab_faults.join("\n  "),
            if r.disagreements.is_empty() {
                String::new()
            } else {
                format!("\nand disagreements besides:\n  {}", r.disagreements.join("\n  "))
            }
        );
    }
    if !r.disagreements.is_empty() {
        bail!(
            "faultline in the guest and the drive's ground truth disagree ({} of {} cycles; {}):\n  {}",
            r.disagreements.len(),
            r.cycles,
            json.display(),
            r.disagreements.join("\n  ")
        );
    }
    if r.explained.is_empty() {
        println!("lab: the guest's findings and the drive's ground truth agree, sector by sector, in every one of {} cycles", r.cycles);
    } else {
        println!(
            "lab: the guest's findings and the drive's ground truth agree in {} of {} cycles; the others' differences are explained above",
            r.cycles as usize - r.explained.len(),
            r.cycles
        );
    }
    Ok(())
}

pub(super) fn cmd_exec(a: ExecArgs) -> Result<Exit> {
    let script = std::fs::read_to_string(&a.script).with_context(|| format!("cannot read {}", a.script.display()))?;
    let (opts, mut p) = prepare(&a.m, "exec", SimFromScenario::default())?;
    for f in &a.put {
        let name =
            f.file_name().filter(|n| *n != "lab").with_context(|| format!("--put {}: not a file name the share can take", f.display()))?;
        std::fs::copy(f, p.share.join(name)).with_context(|| format!("--put: cannot copy {} into the share", f.display()))?;
    }
    p.write_cmd(&format!("{}{script}", session::preamble(opts.usb, opts.usb_fault.as_deref())))?;
    let out = boot(&mut p, &opts, false, false)?;
    if let Some(sim) = &p.sim {
        eprintln!("{}", sim.traffic());
    }
    match out.exit_code {
        Some(0) => Ok(Exit::Clean),
        Some(c) => {
            eprintln!("lab exec: the script exited with {c} (its output: {})", p.share.join("lab/guest.log").display());
            Ok(Exit::Findings)
        }
        None => bail!("the guest powered off without the script's exit code; console:\n{}", console_tail(&p.console(), 30)),
    }
}

pub(super) fn cmd_shell(m: MachineArgs) -> Result<Exit> {
    let (opts, mut p) = prepare(&m, "shell", SimFromScenario::default())?;
    p.write_cmd(&session::preamble(opts.usb, opts.usb_fault.as_deref()))?;
    boot(&mut p, &opts, true, false)?;
    Ok(Exit::Clean)
}
