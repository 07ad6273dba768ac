//! `lab guest ...`: what the guest's command script calls, inside the guest only
//! (`faultline::lab::guest`, `faultline::lab::usb::gadget`).

use anyhow::Result;
use faultline::lab::guest;
use faultline::lab::usb::gadget;
use faultline::scenario::Scenario;
use std::path::Path;
use std::time::Duration;

use super::args::GuestCmd;
use crate::exit::Exit;

pub(super) fn cmd_guest(g: GuestCmd) -> Result<Exit> {
    match g {
        GuestCmd::Usb { board, uart } => {
            gadget::serve(board.into(), &uart)?;
            Ok(Exit::Clean)
        }
        GuestCmd::Smart { dev } => {
            println!("{}", guest::smart_json(&dev)?);
            Ok(Exit::Clean)
        }
        GuestCmd::Identify { dev } => {
            println!("{}", guest::identify_json(&dev)?);
            Ok(Exit::Clean)
        }
        GuestCmd::Probe { dev, seconds, interval_ms } => {
            guest::probe(&dev, Duration::from_secs(seconds), Duration::from_millis(interval_ms), &mut std::io::stdout())?;
            Ok(Exit::Clean)
        }
        GuestCmd::Env => {
            print!("{}", guest::find()?.env());
            Ok(Exit::Clean)
        }
        GuestCmd::Run { scenario, run_dir, truth } => {
            let d = guest::find()?;
            let origin = scenario.display().to_string();
            let s = guest::lab_scenario(Scenario::load(&scenario)?, &origin, &d.ns)?;
            let mut sync = guest::TruthSync::new(Path::new("/share/lab"));
            let observer: Option<&mut (dyn faultline::runner::CycleObserver + 'static)> = if truth { Some(&mut sync) } else { None };
            super::super::run::cmd_run_scenario(s, &origin, Some(run_dir), None, &Default::default(), observer)
        }
    }
}
