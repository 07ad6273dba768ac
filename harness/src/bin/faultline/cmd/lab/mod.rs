//! `faultline lab`: faultline inside a QEMU guest against the real Linux NVMe driver, on an
//! emulated dual-port drive (docs/LAB.md). The command line only: the lab itself is the
//! library's `faultline::lab`. `args.rs` holds the arguments; `setup` fills the cache (here),
//! `run` / `exec` / `shell` prepare and boot a machine (`run.rs`), `host` becomes one guest of a
//! run across hosts (`host.rs`), `guest` is what the guest's command script calls (`guest.rs`).
//! This file only dispatches; none of them imports it.

mod args;
mod guest;
mod host;
mod run;

use anyhow::Result;
use faultline::lab::setup;
use std::time::Instant;

use crate::exit::Exit;
pub use args::LabArgs;
use args::{cache_dir, this_binary, LabCmd, SetupArgs};

pub fn cmd_lab(a: LabArgs) -> Result<Exit> {
    match a.cmd {
        LabCmd::Setup(s) => cmd_setup(s),
        LabCmd::Run(r) => run::cmd_run(r),
        LabCmd::Exec(e) => run::cmd_exec(e),
        LabCmd::Shell(m) => run::cmd_shell(m),
        LabCmd::Host(h) => host::cmd_host(h),
        LabCmd::Guest(g) => guest::cmd_guest(g),
    }
}

fn cmd_setup(a: SetupArgs) -> Result<Exit> {
    let cache = cache_dir(a.cache.as_deref())?;
    let t0 = Instant::now();
    let mut report = setup::Report::default();
    let lab = setup::setup(&cache, &this_binary(&a.faultline)?, &mut report)?;
    for (step, fresh) in &report.steps {
        println!("lab setup: {step}: {}", if *fresh { "done" } else { "up to date" });
    }
    for n in &report.notes {
        eprintln!("faultline: note: {n}");
    }
    println!("lab setup: cache {}, kernel {}, in {:.1} s", cache.display(), lab.kernel.display(), t0.elapsed().as_secs_f64());
    Ok(Exit::Clean)
}
