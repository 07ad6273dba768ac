//! The USB side of the lab's Quarch module (`lab run --usb quarch`): what a module's USB
//! firmware does between its bulk endpoints and its command processor, the same processor its
//! serial port reaches. The lab's gadget (FunctionFS on the guest's `dummy_hcd`) runs this, and
//! the command processor is the host's Quarch emulator, reached over the guest's third UART
//! with the serial framing.
//!
//! The USB framing, as quarchpy (`connection_specific/connection_USB.py`, 2.2.23) and
//! faultline's `quarch/usb.rs` speak it:
//! - a command is one bulk OUT packet, the command's text NUL-padded to 64 bytes, no line end;
//! - the reply is bulk IN packets, one line each, NUL-padded to 64 bytes, then one packet that
//!   starts with `>` (the prompt); the module does not echo the command, as its serial port
//!   does;
//! - a module with 64-byte endpoints is locked into USB mode first: `02 00 00 01 04 01` locks
//!   and `02 00 00 01 03 00` unlocks, each one bulk OUT packet of 6 bytes, each answered by a
//!   packet whose byte 2 is 1 (quarchpy checks only byte 2, on both, and so does faultline; the
//!   other bytes are the request's first two here: no public document says what a module puts
//!   there).
//!
//! The firmware can misbehave as a module on a bad cable or with a wedged USB stack does
//! ([`UsbFault`], for the lab's tests of the controller's USB faults): a reply that never
//! comes, a short reply, a stalled endpoint.

pub use super::usb_fault::{FaultSpec, UsbFault};

/// The 64-byte packet of a command and of each reply line.
pub const PACKET: usize = 64;

/// The module's interface at full speed: vendor class, one OUT and four IN bulk endpoints of
/// 64 bytes (`ep1` the OUT, `ep2`..`ep5` the INs; the lab's gadget answers on the IN that the
/// UDC gave the OUT's number: see `cmd/lab/quarch_gadget.rs`).
pub fn descriptors() -> Vec<u8> {
    let mut eps = vec![(0x01u8, 2u8, PACKET as u16, 0u8)];
    eps.extend((1..=4).map(|n| (0x80 | n, 2, PACKET as u16, 0)));
    super::ffs::interface([0xff, 0x00, 0x00], &eps)
}
const LOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x04, 0x01];
const UNLOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x03, 0x00];

/// What the firmware does with one bulk OUT packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet {
    /// Answer on bulk IN at once (the USB-mode lock and unlock).
    Answer(Vec<u8>),
    /// Hand this line (ending `\r\n`) to the command processor; its reply goes through
    /// [`Firmware::on_serial`].
    Command(Vec<u8>),
    /// Not a packet this firmware takes (the reason, for the gadget's log); nothing is answered,
    /// so the host's read times out, as on a module that drops it.
    Dropped(String),
    /// Halt the reply endpoint ([`UsbFault::Stall`]); the command goes nowhere.
    Stall,
}

/// The firmware's state: whether the module is locked into USB mode, the command whose reply
/// is awaited, and the serial bytes of that reply read so far.
#[derive(Debug, Default)]
pub struct Firmware {
    pub locked: bool,
    pending: Option<String>,
    serial: Vec<u8>,
    /// The fault of the command awaited.
    fault: Option<UsbFault>,
    /// The fault the last packet met, if any (for the gadget's log, and to clear a `once`).
    pub faulted: Option<UsbFault>,
}

impl Firmware {
    /// One bulk OUT packet from the host.
    pub fn on_packet(&mut self, p: &[u8]) -> Packet {
        self.on_packet_with(p, None)
    }

    /// One bulk OUT packet from the host; a command that `spec` names meets its fault (the
    /// USB-mode lock is answered whatever the fault). [`Firmware::faulted`] says whether it did.
    pub fn on_packet_with(&mut self, p: &[u8], spec: Option<&FaultSpec>) -> Packet {
        self.faulted = None;
        if p == LOCK || p == UNLOCK {
            self.locked = p == LOCK;
            return Packet::Answer(vec![p[0], p[1], 1]);
        }
        if p.len() != PACKET {
            return Packet::Dropped(format!("a {}-byte packet that is neither a command (64 bytes) nor the USB-mode lock", p.len()));
        }
        let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
        let cmd = &p[..end];
        if let Some(at) = p[end..].iter().position(|&b| b != 0) {
            return Packet::Dropped(format!("a command packet with bytes after its NUL padding began (byte {})", end + at));
        }
        if !cmd.iter().all(|&c| (0x20..0x7f).contains(&c)) {
            return Packet::Dropped("a command packet with non-text bytes".into());
        }
        let text = String::from_utf8_lossy(cmd).into_owned();
        let fault = spec.filter(|s| text.starts_with(&s.prefix)).map(|s| s.fault);
        self.faulted = fault;
        if fault == Some(UsbFault::Stall) {
            return Packet::Stall;
        }
        self.fault = fault;
        self.pending = Some(text.clone());
        self.serial.clear();
        let mut line = text.into_bytes();
        line.extend_from_slice(b"\r\n");
        Packet::Command(line)
    }

    /// Bytes from the command processor (its serial framing: the command echoed, the reply's
    /// lines, then the prompt `>`): the bulk IN packets of the reply once the prompt has come,
    /// none before. Bytes while no command is awaited are dropped.
    pub fn on_serial(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let Some(cmd) = self.pending.as_ref() else { return Vec::new() };
        self.serial.extend_from_slice(bytes);
        let prompt = (0..self.serial.len()).find(|&i| self.serial[i] == b'>' && (i == 0 || self.serial[i - 1] == b'\n'));
        let Some(at) = prompt else { return Vec::new() };
        let text = String::from_utf8_lossy(&self.serial[..at]).into_owned();
        let mut lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
        // The serial port's echo is the first line; the USB side has none.
        if lines.first().is_some_and(|l| l.trim() == cmd.trim()) {
            lines.remove(0);
        }
        let fault = self.fault.take();
        self.pending = None;
        self.serial.clear();
        let mut out = Vec::new();
        match fault {
            Some(UsbFault::Timeout) => return out,
            Some(UsbFault::Short) => {
                let first = lines.iter().find(|l| !l.is_empty()).map_or(&b">"[..], |l| l.as_bytes());
                return vec![first[..1].to_vec()];
            }
            _ => {}
        }
        for l in lines.iter().filter(|l| !l.is_empty()) {
            for chunk in l.as_bytes().chunks(PACKET) {
                out.push(padded(chunk));
            }
        }
        out.push(padded(b">"));
        out
    }
}

fn padded(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(PACKET, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Vec<u8> {
        padded(s.as_bytes())
    }

    #[test]
    fn the_lock_is_answered_with_byte_2_set_and_a_command_goes_on_as_a_line() {
        let mut f = Firmware::default();
        assert_eq!(f.on_packet(&UNLOCK), Packet::Answer(vec![2, 0, 1]));
        assert_eq!(f.on_packet(&LOCK), Packet::Answer(vec![2, 0, 1]));
        assert!(f.locked);
        assert_eq!(f.on_packet(&cmd("RUN:POWer DOWN")), Packet::Command(b"RUN:POWer DOWN\r\n".to_vec()));
    }

    #[test]
    fn the_reply_is_one_packet_a_line_without_the_echo_then_the_prompt() {
        let mut f = Firmware::default();
        f.on_packet(&cmd("*IDN?"));
        // The serial reply, in pieces, as a UART delivers it.
        assert!(f.on_serial(b"*IDN?\r\nFamily: Torridon\r\nName: Programmable").is_empty());
        let long = "x".repeat(70);
        let out = f.on_serial(format!(" Power Module\r\n{long}\r\n>").as_bytes());
        assert_eq!(
            out,
            vec![cmd("Family: Torridon"), cmd("Name: Programmable Power Module"), cmd(&"x".repeat(64)), cmd("xxxxxx"), cmd(">")]
        );
        // What faultline's USB wire reads back from these packets.
        assert!(f.on_serial(b"late bytes\r\n>").is_empty(), "nothing is awaited");
    }

    #[test]
    fn faults_drop_or_cut_the_reply_or_halt_before_the_command_goes_on() {
        let spec = |fault, prefix: &str| FaultSpec { fault, once: false, prefix: prefix.into() };
        let mut f = Firmware::default();
        assert_eq!(f.on_packet_with(&cmd("RUN:POWer DOWN"), Some(&spec(UsbFault::Stall, ""))), Packet::Stall);
        assert_eq!(f.faulted, Some(UsbFault::Stall));
        assert_eq!(f.on_serial(b"RUN:POWer DOWN\r\nOK\r\n>"), Vec::<Vec<u8>>::new(), "nothing was sent on");
        let timeout = spec(UsbFault::Timeout, "RUN:POWer DOWN");
        assert_eq!(f.on_packet_with(&cmd("RUN:POWer DOWN"), Some(&timeout)), Packet::Command(b"RUN:POWer DOWN\r\n".to_vec()));
        assert!(f.on_serial(b"RUN:POWer DOWN\r\nOK\r\n>").is_empty());
        // A command the prefix does not name is answered whole.
        f.on_packet_with(&cmd("*IDN?"), Some(&timeout));
        assert_eq!(f.faulted, None);
        assert_eq!(f.on_serial(b"*IDN?\r\nName: x\r\n>"), vec![cmd("Name: x"), cmd(">")]);
        f.on_packet_with(&cmd("RUN:POWer?"), Some(&spec(UsbFault::Short, "")));
        assert_eq!(f.on_serial(b"RUN:POWer?\r\nOFF\r\n>"), vec![b"O".to_vec()]);
        // The lock is answered whatever the fault; the next command is whole.
        assert_eq!(f.on_packet_with(&LOCK, Some(&spec(UsbFault::Stall, ""))), Packet::Answer(vec![2, 0, 1]));
        assert_eq!(f.faulted, None);
        f.on_packet(&cmd("RUN:POWer?"));
        assert_eq!(f.on_serial(b"RUN:POWer?\r\nOFF\r\n>"), vec![cmd("OFF"), cmd(">")]);
    }

    #[test]
    fn an_empty_command_gets_the_prompt_alone_and_bad_packets_are_dropped() {
        let mut f = Firmware::default();
        assert_eq!(f.on_packet(&cmd("")), Packet::Command(b"\r\n".to_vec()));
        assert_eq!(f.on_serial(b"\r\n>"), vec![cmd(">")]);
        for (p, why) in [
            (vec![1, 2, 3], "a 3-byte packet"),
            (
                {
                    let mut p = cmd("RUN");
                    p[10] = b'X';
                    p
                },
                "after its NUL padding began (byte 10)",
            ),
            (cmd("RUN\u{7f}"), "non-text"),
        ] {
            match f.on_packet(&p) {
                Packet::Dropped(w) => assert!(w.contains(why), "{w}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
