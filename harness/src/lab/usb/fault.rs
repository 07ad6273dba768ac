//! The USB faults the lab's boards can be told to show ([`UsbFault`]): a reply that never
//! comes, a short reply, a stall, for the requests a line in a file names
//! (`/run/lab-usb-fault` in the guest: `timeout|short|stall [once] [PREFIX]`), and that file
//! read as the boards' gadgets meet each request ([`fault_now`]).

/// A misbehaviour of a board's USB side, for the requests a [`FaultSpec`] names. The lab's
/// gadgets read it from a file the guest's script writes ([`UsbFault::parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsbFault {
    /// No reply is sent. A Quarch module's command reaches its command processor (a switch
    /// switches); a HID relay's request is left unanswered (not carried out).
    Timeout,
    /// The reply is cut short: a Quarch module's is its first byte, in a short packet, and
    /// nothing after it (no prompt); a HID relay's feature report is 3 bytes of its 8.
    Short,
    /// The request is stalled and not carried out: a Quarch module's reply endpoint is halted
    /// (the host's read ends with a stall until it clears the halt), a HID relay's control
    /// request stalls.
    Stall,
}

/// Which commands meet which fault: `FAULT [once] [PREFIX]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub fault: UsbFault,
    /// For the first command it meets only.
    pub once: bool,
    /// The requests it meets start with this (all of them when empty): a Quarch command such as
    /// `RUN:POWer DOWN`, or `SET_REPORT` / `GET_REPORT` for a HID relay.
    pub prefix: String,
}

/// A fault line the boards do not take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    #[error("no USB fault {word:?} (timeout, short or stall, then optionally `once`, then a command prefix)")]
    Unknown { word: String },
}

impl UsbFault {
    /// `timeout`, `short` or `stall`, then optionally `once`, then optionally the command prefix
    /// it is for (the rest of the line); empty: none.
    pub fn parse(text: &str) -> Result<Option<FaultSpec>, FaultSpecError> {
        let text = text.trim();
        let (first, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let fault = match first {
            "" => return Ok(None),
            "timeout" => UsbFault::Timeout,
            "short" => UsbFault::Short,
            "stall" => UsbFault::Stall,
            w => return Err(FaultSpecError::Unknown { word: w.to_string() }),
        };
        let rest = rest.trim();
        let (once, prefix) = match rest.split_once(char::is_whitespace).unwrap_or((rest, "")) {
            ("once", p) => (true, p.trim()),
            _ => (false, rest),
        };
        Ok(Some(FaultSpec { fault, once, prefix: prefix.to_string() }))
    }
}

/// Where the guest's script names a USB fault for a board's next requests
/// ([`UsbFault::parse`]: `timeout`, `short` or `stall`, optionally `once`, optionally the
/// requests' prefix); removed to clear it.
pub const FAULT_FILE: &str = "/run/lab-usb-fault";

/// The fault the file names now (logged if the file is bad).
pub fn fault_now() -> Option<FaultSpec> {
    let text = std::fs::read_to_string(FAULT_FILE).ok()?;
    match UsbFault::parse(&text) {
        Ok(f) => f,
        Err(e) => {
            println!("lab usb: {FAULT_FILE}: {e}; no fault");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_file_names_one_fault_and_maybe_once() {
        let spec = |fault, once, prefix: &str| Ok(Some(FaultSpec { fault, once, prefix: prefix.into() }));
        assert_eq!(UsbFault::parse(""), Ok(None));
        assert_eq!(UsbFault::parse("stall\n"), spec(UsbFault::Stall, false, ""));
        assert_eq!(UsbFault::parse("timeout once"), spec(UsbFault::Timeout, true, ""));
        assert_eq!(UsbFault::parse("short once RUN:POWer DOWN\n"), spec(UsbFault::Short, true, "RUN:POWer DOWN"));
        assert_eq!(UsbFault::parse("timeout RUN:POWer UP"), spec(UsbFault::Timeout, false, "RUN:POWer UP"));
        let e = UsbFault::parse("babble").unwrap_err();
        assert_eq!(e, FaultSpecError::Unknown { word: "babble".into() });
        assert!(e.to_string().contains("no USB fault \"babble\""));
    }
}
