//! Quarch over USB: the framing of [`QuarchWire`] over any [`BulkPipe`] (64-byte NUL-padded
//! command packets, reply packets up to one starting with `>`), the USB-mode lock of modules
//! with 64-byte endpoints, and opening a module by its USB serial number through rusb.

use super::wire::{QuarchWire, WireError, WireFault};
use crate::control::usb::{BulkPipe, RusbBulk, UsbError, QUARCH_PID, QUARCH_VID};
use std::time::{Duration, Instant};

const QUARCH_USB_LOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x04, 0x01];
const QUARCH_USB_UNLOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x03, 0x00];

/// The Quarch USB framing over any [`BulkPipe`].
pub struct QuarchUsbWire<P: BulkPipe = RusbBulk> {
    pipe: P,
    /// Modules locked into USB mode on open are unlocked when the wire is dropped.
    unlock_on_close: bool,
}

impl QuarchUsbWire<RusbBulk> {
    /// Opens the Quarch module whose USB serial number is `serial` (a `QTL` prefix is ignored
    /// on both sides, as quarchpy does).
    pub fn open(serial: &str, timeout: Duration) -> Result<QuarchUsbWire<RusbBulk>, WireError> {
        let strip = |s: &str| s.trim().trim_start_matches("QTL").trim_start_matches("qtl").to_string();
        let want = strip(serial);
        let pipe = RusbBulk::open(QUARCH_VID, QUARCH_PID, "Quarch", serial, |sn| strip(sn) == want)?;
        let small = pipe.max_packet_size() <= 64;
        // Built before locking, so that a refused lock still unlocks on the way out.
        let mut wire = QuarchUsbWire { pipe, unlock_on_close: small };
        if small {
            lock_usb_mode(&mut wire.pipe, timeout)?;
        }
        Ok(wire)
    }
}

impl<P: BulkPipe> Drop for QuarchUsbWire<P> {
    /// Unlocks USB mode before the pipe (and its interface) is released.
    fn drop(&mut self) {
        if self.unlock_on_close {
            let mut buf = [0u8; 64];
            let t = Duration::from_millis(500);
            if self.pipe.write(&QUARCH_USB_UNLOCK, t).is_ok() {
                let _ = self.pipe.read(&mut buf, t);
            }
        }
    }
}

/// Locks a 64-byte-endpoint module into USB mode (unlock first, to free a module a previous
/// process left locked).
pub fn lock_usb_mode<P: BulkPipe>(pipe: &mut P, timeout: Duration) -> Result<(), WireError> {
    let mut buf = [0u8; 64];
    pipe.write(&QUARCH_USB_UNLOCK, timeout)?;
    let _ = pipe.read(&mut buf, timeout);
    pipe.write(&QUARCH_USB_LOCK, timeout)?;
    let n = pipe.read(&mut buf, timeout)?;
    if n < 3 || buf[2] != 1 {
        return Err(WireError::LockRefused { reply: buf[..n].to_vec() });
    }
    Ok(())
}

impl<P: BulkPipe> QuarchUsbWire<P> {
    pub fn new(pipe: P) -> Self {
        QuarchUsbWire { pipe, unlock_on_close: false }
    }

    /// The 64-byte, NUL-padded command packet.
    pub fn packet(cmd: &str) -> Result<[u8; 64], WireError> {
        let b = cmd.as_bytes();
        if b.len() > 64 {
            return Err(WireError::UsbPacketTooLong { len: b.len() });
        }
        let mut p = [0u8; 64];
        p[..b.len()].copy_from_slice(b);
        Ok(p)
    }
}

/// A failed transfer as a [`WireFault`]: a device that left the bus (libusb's `NoDevice`) is
/// [`WireFault::Gone`], anything else `Closed` (with what arrived so far).
fn lost(e: UsbError, got: Vec<u8>) -> WireFault {
    if e.is_gone() {
        WireFault::Gone { why: format!("{e} (the USB device left the bus: unplugged, or re-enumerated at another address)") }
    } else if e.is_stall() {
        WireFault::Closed { got, why: format!("{e} (the module stalled the endpoint; the halt was cleared)") }
    } else {
        WireFault::Closed { got, why: e.to_string() }
    }
}

impl<P: BulkPipe> QuarchWire for QuarchUsbWire<P> {
    fn exchange(&mut self, cmd: &str, timeout: Duration) -> Result<String, WireFault> {
        let packet = Self::packet(cmd).map_err(|e| WireFault::Garbage { got: Vec::new(), why: e.to_string() })?;
        let n = self.pipe.write(&packet, timeout).map_err(|e| lost(e, Vec::new()))?;
        if n != 64 {
            return Err(WireFault::Closed { got: Vec::new(), why: format!("bulk write sent {n} of 64 bytes") });
        }
        let mut lines: Vec<String> = Vec::new();
        let mut raw = Vec::new();
        let deadline = Instant::now() + timeout;
        // Bounded: at most 1024 packets (64 KiB), and the deadline.
        for _ in 0..1024 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WireFault::Timeout { got: raw });
            }
            let mut buf = [0u8; 64];
            let n = match self.pipe.read(&mut buf, left) {
                Ok(n) => n,
                Err(e) if e.is_timeout() => return Err(WireFault::Timeout { got: raw }),
                Err(e) => return Err(lost(e, raw)),
            };
            raw.extend_from_slice(&buf[..n]);
            let end = buf[..n].iter().position(|&c| c == 0).unwrap_or(n);
            let line = &buf[..end];
            if !line.iter().all(|&c| c == b'\r' || c == b'\n' || c == b'\t' || (0x20..0x7f).contains(&c)) {
                return Err(WireFault::Garbage { got: raw, why: "non-text bytes in the reply".into() });
            }
            let line = String::from_utf8_lossy(line).trim().to_string();
            if line.starts_with('>') {
                return Ok(lines.join("\r\n").trim().to_string());
            }
            lines.push(line);
        }
        Err(WireFault::Garbage { got: raw, why: "no prompt after 1024 packets".into() })
    }

    /// Sends a junk command and reads until the pipe is quiet, as quarchpy's
    /// `clean_and_flush_stuck_usb_comms` does.
    fn resync(&mut self, timeout: Duration) -> Result<(), WireFault> {
        let p = Self::packet("HEZZ0?").expect("fits");
        self.pipe.write(&p, timeout).map_err(|e| lost(e, Vec::new()))?;
        let mut buf = [0u8; 64];
        for _ in 0..1024 {
            if self.pipe.read(&mut buf, Duration::from_millis(250)).is_err() {
                return Ok(());
            }
        }
        Err(WireFault::Garbage { got: Vec::new(), why: "the pipe never went quiet".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// What a real pipe returns when nothing arrives in time.
    fn timed_out() -> UsbError {
        UsbError::Bulk { op: "bulk read", source: rusb::Error::Timeout }
    }

    #[derive(Default)]
    struct FakePipe {
        written: Vec<Vec<u8>>,
        replies: VecDeque<Vec<u8>>,
    }

    impl BulkPipe for FakePipe {
        fn write(&mut self, packet: &[u8], _t: Duration) -> Result<usize, UsbError> {
            self.written.push(packet.to_vec());
            Ok(packet.len())
        }
        fn read(&mut self, buf: &mut [u8], _t: Duration) -> Result<usize, UsbError> {
            let r = self.replies.pop_front().ok_or_else(timed_out)?;
            buf[..r.len()].copy_from_slice(&r);
            Ok(r.len())
        }
    }

    fn padded(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.resize(64, 0);
        v
    }

    #[test]
    fn usb_commands_are_nul_padded_to_64_bytes_and_replies_end_at_the_prompt() {
        let mut pipe = FakePipe::default();
        pipe.replies.extend([padded("Family: Torridon\r\n"), padded("Name: Drive Control Module"), padded(">")]);
        let mut w = QuarchUsbWire::new(pipe);
        let r = w.exchange("*IDN?", Duration::from_millis(10)).unwrap();
        assert_eq!(r, "Family: Torridon\r\nName: Drive Control Module");
        assert_eq!(w.pipe.written, vec![padded("*IDN?")]);
        assert!(QuarchUsbWire::<FakePipe>::packet(&"x".repeat(65)).is_err());
    }

    #[test]
    fn usb_missing_prompt_is_a_timeout_and_binary_is_garbage() {
        let mut pipe = FakePipe::default();
        pipe.replies.push_back(padded("OK"));
        let mut w = QuarchUsbWire::new(pipe);
        assert!(matches!(w.exchange("RUN:POWer UP", Duration::from_millis(10)), Err(WireFault::Timeout { .. })));
        w.pipe.replies.push_back(vec![b'O', 0xff, b'K']);
        assert!(matches!(w.exchange("RUN:POWer UP", Duration::from_millis(10)), Err(WireFault::Garbage { .. })));
    }

    /// A pipe whose device has left the bus.
    struct GonePipe;

    impl BulkPipe for GonePipe {
        fn write(&mut self, _packet: &[u8], _t: Duration) -> Result<usize, UsbError> {
            Err(UsbError::Bulk { op: "bulk write", source: rusb::Error::NoDevice })
        }
        fn read(&mut self, _buf: &mut [u8], _t: Duration) -> Result<usize, UsbError> {
            Err(UsbError::Bulk { op: "bulk read", source: rusb::Error::NoDevice })
        }
    }

    #[test]
    fn a_device_that_left_the_bus_is_gone_and_other_failures_are_a_lost_connection() {
        let mut w = QuarchUsbWire::new(GonePipe);
        let e = w.exchange("RUN:POWer UP", Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, WireFault::Gone { .. }), "{e}");
        assert!(e.to_string().contains("bulk write: NoDevice (the USB device left the bus"), "{e}");
        let e = lost(UsbError::Bulk { op: "bulk read", source: rusb::Error::Pipe }, b"OK".to_vec());
        assert!(matches!(e, WireFault::Closed { .. }), "{e}");
    }

    #[test]
    fn usb_mode_lock_checks_the_reply() {
        let mut pipe = FakePipe::default();
        pipe.replies.extend([vec![0, 0, 1], vec![2, 0, 1]]);
        lock_usb_mode(&mut pipe, Duration::from_millis(10)).unwrap();
        assert_eq!(pipe.written, vec![QUARCH_USB_UNLOCK.to_vec(), QUARCH_USB_LOCK.to_vec()]);
        pipe.replies.extend([vec![0, 0, 1], vec![2, 0, 0]]);
        let e = lock_usb_mode(&mut pipe, Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, WireError::LockRefused { .. }), "{e}");
        assert_eq!(e.to_string(), "USB-mode lock refused: \"\\x02\\x00\\x00\"");
    }

    /// Records what was written where the test can still see it after the wire is dropped.
    struct SharedPipe(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

    impl BulkPipe for SharedPipe {
        fn write(&mut self, packet: &[u8], _t: Duration) -> Result<usize, UsbError> {
            self.0.lock().unwrap().push(packet.to_vec());
            Ok(packet.len())
        }
        fn read(&mut self, _buf: &mut [u8], _t: Duration) -> Result<usize, UsbError> {
            Err(timed_out())
        }
    }

    #[test]
    fn a_wire_locked_into_usb_mode_unlocks_when_dropped() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        drop(QuarchUsbWire { pipe: SharedPipe(log.clone()), unlock_on_close: true });
        assert_eq!(*log.lock().unwrap(), vec![QUARCH_USB_UNLOCK.to_vec()]);
        drop(QuarchUsbWire::new(SharedPipe(log.clone())));
        assert_eq!(log.lock().unwrap().len(), 1, "a wire built on a given pipe sends nothing on drop");
    }
}
