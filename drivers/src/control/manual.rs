//! `manual`: a person is the switch. The prompt goes to stderr and the answer comes from
//! stdin; without a terminal on stdin there is nobody to ask, so the switch refuses to open.

use crate::power::{PowerCaps, PowerError, PowerState, PowerSwitch};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc;
use std::time::Duration;

/// How long a person has to answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

pub struct ManualSwitch {
    answers: mpsc::Receiver<String>,
    timeout: Duration,
}

impl ManualSwitch {
    /// Opens on the process's terminal; refuses when stdin is not a terminal.
    pub fn open_interactive() -> Result<ManualSwitch, PowerError> {
        if !std::io::stdin().is_terminal() {
            return Err(PowerError::Unsupported {
                switch: "manual".into(),
                what: "prompt anyone: stdin is not a terminal (run it interactively)".into(),
            });
        }
        let (tx, rx) = mpsc::channel();
        // One reader thread for the process's stdin; it ends with stdin or with the switch.
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ManualSwitch { answers: rx, timeout: ANSWER_TIMEOUT })
    }

    /// A switch answered from `answers` (tests, or a front end of its own).
    pub fn with_answers(answers: mpsc::Receiver<String>, timeout: Duration) -> ManualSwitch {
        ManualSwitch { answers, timeout }
    }

    fn ask(&mut self, what: &str) -> Result<(), PowerError> {
        let command = format!("ask to {what}");
        eprint!("faultline: {what} now, then type `done` and Enter (`fail` if you could not): ");
        let _ = std::io::stderr().flush();
        let answer = self.answers.recv_timeout(self.timeout).map_err(|_| PowerError::Failed {
            switch: "manual".into(),
            command: command.clone(),
            reason: format!("no answer within {:?}", self.timeout),
        })?;
        match answer.trim().to_ascii_lowercase().as_str() {
            "done" | "d" | "yes" | "y" => Ok(()),
            other => Err(PowerError::Failed { switch: "manual".into(), command, reason: format!("the operator answered {other:?}") }),
        }
    }
}

impl PowerSwitch for ManualSwitch {
    fn name(&self) -> String {
        "manual".into()
    }
    fn capabilities(&self) -> PowerCaps {
        // A person's word is an acknowledgement, not a measurement.
        PowerCaps { state_readback: false, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        self.ask("cut the drive's power")
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        self.ask("restore the drive's power")
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        Err(PowerError::Unsupported { switch: "manual".into(), what: "read its state".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decide() {
        let (tx, rx) = mpsc::channel();
        let mut m = ManualSwitch::with_answers(rx, Duration::from_millis(100));
        tx.send("done".into()).unwrap();
        m.power_off().unwrap();
        tx.send("fail".into()).unwrap();
        assert!(m.power_on().unwrap_err().to_string().contains("\"fail\""));
        assert!(m.power_on().unwrap_err().to_string().contains("no answer"));
    }
}
