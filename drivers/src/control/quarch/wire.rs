//! The wire level of the Quarch protocol: [`QuarchWire`] (one command out, its reply text
//! back), [`WireFault`] (what went wrong below the protocol), and the serial and TCP framings.
//! The USB framing is in `usb.rs`, next to this file. Framing details are in the parent
//! module's doc.

use crate::control::usb::UsbError;
use crate::control::{drain, open_serial, read_until, show_bytes, write_all, ReadFault, SerialError};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Why a wire to a Quarch module could not be opened or could not frame a command.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error(transparent)]
    Serial(#[from] SerialError),
    #[error("cannot resolve {host}:{port}: {source}")]
    Resolve { host: String, port: u16, source: std::io::Error },
    #[error("{host}:{port} resolved to no address")]
    NoAddress { host: String, port: u16 },
    /// The last address tried, and why it refused.
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("command of {len} bytes is too long for one TCP frame")]
    TcpFrameTooLong { len: usize },
    #[error(transparent)]
    Usb(#[from] UsbError),
    /// A module with 64-byte endpoints did not confirm the USB-mode lock; its reply.
    #[error("USB-mode lock refused: {}", show_bytes(.reply))]
    LockRefused { reply: Vec<u8> },
    #[error("command of {len} bytes does not fit a 64-byte USB packet")]
    UsbPacketTooLong { len: usize },
}

/// Why an exchange failed below the protocol level.
#[derive(Debug)]
pub enum WireFault {
    /// No complete reply in time; `got` is what arrived.
    Timeout { got: Vec<u8> },
    /// A reply arrived but is not a well-formed answer to the command.
    Garbage { got: Vec<u8>, why: String },
    /// The connection closed or failed.
    Closed { got: Vec<u8>, why: String },
    /// The module left the bus (a USB device gone: unplugged, or re-enumerated): no retry on
    /// this connection can reach it.
    Gone { why: String },
}

impl std::fmt::Display for WireFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireFault::Timeout { got } => write!(f, "no complete reply in time (got {})", show_bytes(got)),
            WireFault::Garbage { got, why } => write!(f, "garbled reply: {why} (got {})", show_bytes(got)),
            WireFault::Closed { got, why } => write!(f, "connection lost: {why} (got {})", show_bytes(got)),
            WireFault::Gone { why } => write!(f, "the module is gone: {why}"),
        }
    }
}

/// One transport to a Quarch module: sends one command, returns its reply text (no echo, no
/// prompt, surrounding whitespace trimmed).
pub trait QuarchWire: Send {
    fn exchange(&mut self, cmd: &str, timeout: Duration) -> Result<String, WireFault>;
    /// Brings the link back to a known state after a fault.
    fn resync(&mut self, timeout: Duration) -> Result<(), WireFault>;
}

/// True when `b` ends with the prompt: a `>` alone or at the start of a line.
fn ends_with_prompt(b: &[u8]) -> bool {
    matches!(b, [.., b'\n', b'>'] | [b'>'])
}

/// Reply text from the bytes before the prompt: must be printable text.
fn reply_text(body: &[u8], all: &[u8]) -> Result<String, WireFault> {
    let ok = body.iter().all(|&c| c == b'\r' || c == b'\n' || c == b'\t' || (0x20..0x7f).contains(&c));
    if !ok {
        return Err(WireFault::Garbage { got: all.to_vec(), why: "non-text bytes in the reply".into() });
    }
    Ok(String::from_utf8_lossy(body).trim().to_string())
}

// --- serial ----------------------------------------------------------------------------------

pub struct SerialWire {
    port: Box<dyn serialport::SerialPort>,
}

fn set_port_timeout(p: &mut Box<dyn serialport::SerialPort>, t: Duration) {
    let _ = p.set_timeout(t);
}

impl SerialWire {
    pub fn open(path: &std::path::Path, timeout: Duration) -> Result<SerialWire, WireError> {
        Ok(SerialWire { port: open_serial(path, 19200, timeout)? })
    }

    /// Parses `echo\r\nreply\r\n>`. Bytes that stop after the echo line, or end without the
    /// prompt, are garbage (never an index past the reply).
    pub fn parse_reply(cmd: &str, buf: &[u8]) -> Result<String, WireFault> {
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            return Err(WireFault::Garbage { got: buf.to_vec(), why: "no echo line".into() });
        };
        let echo = String::from_utf8_lossy(&buf[..eol]);
        if !echo.trim().eq_ignore_ascii_case(cmd.trim()) {
            return Err(WireFault::Garbage { got: buf.to_vec(), why: format!("echo {:?} does not match the command", echo.trim()) });
        }
        let Some(body) = buf[eol + 2..].strip_suffix(b">") else {
            return Err(WireFault::Garbage { got: buf.to_vec(), why: "no prompt after the echo line".into() });
        };
        reply_text(body, buf)
    }
}

impl QuarchWire for SerialWire {
    fn exchange(&mut self, cmd: &str, timeout: Duration) -> Result<String, WireFault> {
        let closed = |e: std::io::Error| WireFault::Closed { got: Vec::new(), why: e.to_string() };
        write_all(&mut self.port, format!("{cmd}\r\n").as_bytes()).map_err(closed)?;
        let mut buf = Vec::new();
        // The echo may itself contain `>` (Torridon addresses `<3>`): look for the prompt only
        // after the echo line.
        let done = |b: &[u8]| b.windows(2).position(|w| w == b"\r\n").is_some_and(|eol| ends_with_prompt(&b[eol + 2..]));
        match read_until(&mut self.port, &mut buf, Instant::now() + timeout, set_port_timeout, done) {
            Ok(()) => Self::parse_reply(cmd, &buf),
            Err(ReadFault::Timeout) => Err(WireFault::Timeout { got: buf }),
            Err(ReadFault::TooLong) => Err(WireFault::Garbage { got: buf, why: "reply too long".into() }),
            Err(ReadFault::Closed) => Err(WireFault::Closed { got: buf, why: "end of file".into() }),
            Err(ReadFault::Io(e)) => Err(WireFault::Closed { got: buf, why: e.to_string() }),
        }
    }

    fn resync(&mut self, timeout: Duration) -> Result<(), WireFault> {
        let quiet = Duration::from_millis(60);
        drain(&mut self.port, quiet, timeout, set_port_timeout);
        let _ = self.port.clear(serialport::ClearBuffer::Input);
        write_all(&mut self.port, b"\r\n").map_err(|e| WireFault::Closed { got: Vec::new(), why: e.to_string() })?;
        let mut buf = Vec::new();
        let r = read_until(&mut self.port, &mut buf, Instant::now() + timeout, set_port_timeout, |b| b.ends_with(b">"));
        // Whatever a late reply left behind goes too.
        drain(&mut self.port, quiet, timeout, set_port_timeout);
        match r {
            Ok(()) => Ok(()),
            Err(ReadFault::Io(e)) => Err(WireFault::Closed { got: buf, why: e.to_string() }),
            Err(ReadFault::Closed) => Err(WireFault::Closed { got: buf, why: "end of file".into() }),
            Err(_) => Err(WireFault::Timeout { got: buf }),
        }
    }
}

// --- TCP -------------------------------------------------------------------------------------

pub struct TcpWire {
    host: String,
    port: u16,
    stream: Option<TcpStream>,
    timeout: Duration,
}

impl TcpWire {
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpWire, WireError> {
        let mut w = TcpWire { host: host.to_string(), port, stream: None, timeout };
        w.reconnect()?;
        Ok(w)
    }

    fn reconnect(&mut self) -> Result<(), WireError> {
        self.stream = None;
        let addrs: Vec<_> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|source| WireError::Resolve { host: self.host.clone(), port: self.port, source })?
            .collect();
        let mut last = WireError::NoAddress { host: self.host.clone(), port: self.port };
        for a in addrs {
            match TcpStream::connect_timeout(&a, self.timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let _ = s.set_write_timeout(Some(self.timeout));
                    self.stream = Some(s);
                    return Ok(());
                }
                Err(source) => last = WireError::Connect { addr: a, source },
            }
        }
        Err(last)
    }

    /// Encodes one command frame: the 16-bit little-endian length of `CMD\r\n` (its high byte
    /// always 0 here: no Quarch command comes near 256 bytes), then the text.
    pub fn frame(cmd: &str) -> Result<Vec<u8>, WireError> {
        let body = format!("{cmd}\r\n");
        let len = u8::try_from(body.len()).map_err(|_| WireError::TcpFrameTooLong { len: body.len() })?;
        let mut out = vec![len, 0];
        out.extend_from_slice(body.as_bytes());
        Ok(out)
    }

    /// Strips the packet length prefixes from `raw`; `None` while a packet is incomplete.
    pub fn unpack(raw: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < raw.len() {
            if raw.len() - i < 2 {
                return None;
            }
            let n = u16::from_le_bytes([raw[i], raw[i + 1]]) as usize;
            if raw.len() - i - 2 < n {
                return None;
            }
            out.extend_from_slice(&raw[i + 2..i + 2 + n]);
            i += 2 + n;
        }
        Some(out)
    }
}

impl QuarchWire for TcpWire {
    fn exchange(&mut self, cmd: &str, timeout: Duration) -> Result<String, WireFault> {
        let frame = Self::frame(cmd).map_err(|e| WireFault::Garbage { got: Vec::new(), why: e.to_string() })?;
        let Some(s) = self.stream.as_mut() else {
            return Err(WireFault::Closed { got: Vec::new(), why: "not connected".into() });
        };
        write_all(s, &frame).map_err(|e| WireFault::Closed { got: Vec::new(), why: e.to_string() })?;
        let mut raw = Vec::new();
        let done = |b: &[u8]| TcpWire::unpack(b).is_some_and(|d| ends_with_prompt(&d));
        let set = |s: &mut TcpStream, t: Duration| {
            let _ = s.set_read_timeout(Some(t));
        };
        match read_until(s, &mut raw, Instant::now() + timeout, set, done) {
            Ok(()) => {
                let data = Self::unpack(&raw).expect("checked complete");
                reply_text(&data[..data.len() - 1], &data)
            }
            Err(ReadFault::Timeout) => Err(WireFault::Timeout { got: raw }),
            Err(ReadFault::TooLong) => Err(WireFault::Garbage { got: raw, why: "reply too long".into() }),
            Err(ReadFault::Closed) => Err(WireFault::Closed { got: raw, why: "the module closed the connection".into() }),
            Err(ReadFault::Io(e)) => Err(WireFault::Closed { got: raw, why: e.to_string() }),
        }
    }

    /// A fresh connection is the only sure way back in step with a length-prefixed stream.
    fn resync(&mut self, _timeout: Duration) -> Result<(), WireFault> {
        self.reconnect().map_err(|e| WireFault::Closed { got: Vec::new(), why: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_frames_count_the_command_and_its_line_end() {
        assert_eq!(TcpWire::frame("*IDN?").unwrap(), b"\x07\x00*IDN?\r\n".to_vec());
        let e = TcpWire::frame(&"x".repeat(300)).unwrap_err();
        assert_eq!(e.to_string(), "command of 302 bytes is too long for one TCP frame");
    }

    #[test]
    fn tcp_replies_are_reassembled_from_length_prefixed_packets() {
        assert_eq!(TcpWire::unpack(b"\x02\x00OK\x03\x00\r\n>").unwrap(), b"OK\r\n>".to_vec());
        assert_eq!(TcpWire::unpack(b"\x05\x00OK"), None);
        assert_eq!(TcpWire::unpack(b"\x02"), None);
    }

    #[test]
    fn serial_replies_need_a_matching_echo_and_text() {
        assert_eq!(SerialWire::parse_reply("run:power?", b"RUN:POWER?\r\nON\r\n>").unwrap(), "ON");
        assert_eq!(SerialWire::parse_reply("run:power down <3>", b"run:power down <3>\r\n<3> OK\r\n>").unwrap(), "<3> OK");
        assert!(matches!(SerialWire::parse_reply("*IDN?", b"*IXN?\r\nOK\r\n>"), Err(WireFault::Garbage { .. })));
        assert!(matches!(SerialWire::parse_reply("*IDN?", b"*IDN?\r\nO\x00K\r\n>"), Err(WireFault::Garbage { .. })));
    }

    /// Found by `drivers/tests/parsers.rs` (quarch_serial_mutated_replies): an echo line and
    /// nothing after it sliced `buf[7..6]` and panicked.
    #[test]
    fn serial_reply_that_stops_after_the_echo_is_garbage_not_a_panic() {
        for buf in [&b"*IDN?\r\n"[..], b"*IDN?\r\nOK\r\n", b"*IDN?\r\nOK"] {
            match SerialWire::parse_reply("*IDN?", buf) {
                Err(WireFault::Garbage { why, .. }) => assert!(why.contains("no prompt"), "{why}"),
                other => panic!("{:?}: {other:?}", buf.escape_ascii().to_string()),
            }
        }
        assert_eq!(SerialWire::parse_reply("*IDN?", b"*IDN?\r\n>").unwrap(), "");
    }

    #[test]
    fn prompt_is_a_lone_gt_or_one_at_a_line_start() {
        assert!(ends_with_prompt(b">") && ends_with_prompt(b"OK\r\n>"));
        assert!(!ends_with_prompt(b"<3>") && !ends_with_prompt(b""));
    }
}
