//! The NVMe Persistent Event Log (log 0Dh), parsed from bytes, and the check a power cut makes
//! on it: the drive's own record that its power went away and came back.
//!
//! Layout (NVMe Base Specification 2.0 and later, "Persistent Event Log"; the same offsets as
//! libnvme's `struct nvme_persistent_event_log`, `nvme_persistent_event_entry` and
//! `nvme_power_on_reset_info_list`; all fields little-endian):
//!
//! | header bytes | field |
//! |---|---|
//! | 0 | log identifier, 0Dh |
//! | 4..8 | TNEV, the number of events |
//! | 8..16 | TLL, the log's bytes, header included |
//! | 16 | log revision |
//! | 18..20 | LHL: the header's length less 20 (492 for the 512-byte header); events start at LHL + 20 |
//! | 20..28 | timestamp |
//! | 28..44 | power-on hours |
//! | 44..52 | power cycle count |
//! | 372..374 | generation number |
//! | 480..512 | supported events bitmap (bit N: event type N) |
//!
//! Each event: a header of EHL + 3 bytes (24 today: type at 0, revision at 1, EHL at 2,
//! controller id at 4..6, event timestamp at 6..14, VSIL at 20..22, EL at 22..24), then VSIL
//! bytes of vendor-specific information, then EL - VSIL bytes of event data; the next event
//! starts EHL + 3 + EL bytes on. A power-on or reset event (type 04h) holds the firmware
//! revision (8 bytes), then one 36-byte entry per controller: controller id at 0..2, firmware
//! activation at 2, operation in progress at 3, controller power cycle at 16..20, power-on
//! milliseconds at 20..28, controller timestamp at 28..36.
//!
//! nvme-cli v2.16 and older print a power-on or reset event's data from right after the event
//! header, without skipping the vendor-specific information; its v3.0 candidates skip it but
//! then step to the next event by EL on top, counting VSIL twice. Both read this log wrong
//! for an event with VSIL above zero (docs/DOMAIN.md, "The Persistent Event Log"); this parser
//! follows the specification.

use crate::health::HealthAnomaly;
use serde::{Deserialize, Serialize};

/// The log's identifier.
pub const LID_PEL: u8 = 0x0D;
/// The header's length.
pub const HEADER_BYTES: usize = 512;
/// Event type: power-on or reset.
pub const EVENT_POWER_ON_RESET: u8 = 0x04;
/// The most of the log faultline reads: the newest events are at its end, so a longer log
/// cannot be judged.
pub const MAX_LOG_BYTES: u64 = 16 << 20;
/// A power-on or reset event's per-controller entry.
const POR_ENTRY_BYTES: usize = 36;

/// What the log says of the power cycles: its header's count, and every power-on or reset
/// event it still holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PelSummary {
    pub power_cycle_count: u64,
    pub generation: u16,
    /// Events the header counts.
    pub events: u32,
    pub power_on_resets: Vec<PowerOnReset>,
}

/// One power-on or reset event, as far as the check needs it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PowerOnReset {
    /// The event's timestamp (its header's).
    pub timestamp: u64,
    pub firmware: String,
    /// Per controller: (controller id, controller power cycle, power-on ms, operation in
    /// progress).
    pub controllers: Vec<(u16, u32, u64, u8)>,
}

/// A log that does not parse: what is wrong, and where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PelError {
    #[error("persistent event log: {got} bytes, shorter than its {HEADER_BYTES}-byte header")]
    Short { got: usize },
    #[error("persistent event log: log identifier {0:#04x} at byte 0, not 0x0d")]
    Identifier(u8),
    #[error("persistent event log: header length {lhl} (byte 18) puts the first event at byte {start}, past the {len} bytes read")]
    HeaderLength { lhl: u16, start: usize, len: usize },
    #[error("persistent event log: event {index} at byte {at}: {what}")]
    Event { index: u32, at: usize, what: String },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The log's total length (TLL) as its header gives it: how much to read.
pub fn total_length(header: &[u8]) -> Result<u64, PelError> {
    if header.len() < HEADER_BYTES {
        return Err(PelError::Short { got: header.len() });
    }
    Ok(u64_at(header, 8))
}

/// Parses the log (its header and as many of its events as `b` holds, up to TNEV and TLL).
pub fn parse_pel(b: &[u8]) -> Result<PelSummary, PelError> {
    if b.len() < HEADER_BYTES {
        return Err(PelError::Short { got: b.len() });
    }
    if b[0] != LID_PEL {
        return Err(PelError::Identifier(b[0]));
    }
    let events = u32_at(b, 4);
    let end = usize::try_from(u64_at(b, 8)).unwrap_or(usize::MAX).min(b.len());
    let lhl = u16_at(b, 18);
    let start = usize::from(lhl) + 20;
    if start > b.len() {
        return Err(PelError::HeaderLength { lhl, start, len: b.len() });
    }
    let mut out = PelSummary { power_cycle_count: u64_at(b, 44), generation: u16_at(b, 372), events, power_on_resets: Vec::new() };
    let mut at = start;
    for index in 0..events {
        if at >= end {
            break;
        }
        let bad = |what: String| PelError::Event { index, at, what };
        if end - at < 24 {
            return Err(bad(format!("{} bytes left, shorter than an event header (24)", end - at)));
        }
        let kind = b[at];
        let head = usize::from(b[at + 2]) + 3;
        let (vsil, el) = (usize::from(u16_at(b, at + 20)), usize::from(u16_at(b, at + 22)));
        if head < 24 {
            return Err(bad(format!("event header length {} (byte 2): a header is at least 24 bytes, EHL 21", head - 3)));
        }
        if vsil > el {
            return Err(bad(format!("vendor-specific information of {vsil} bytes in an event of {el}")));
        }
        let next = at + head + el;
        if next > end {
            return Err(bad(format!("{head} + {el} bytes of event, past the log's end at byte {end}")));
        }
        if kind == EVENT_POWER_ON_RESET {
            let data = &b[at + head + vsil..next];
            if data.len() < 8 {
                return Err(bad(format!("a power-on or reset event of {} data bytes: the firmware revision alone is 8", data.len())));
            }
            let firmware = String::from_utf8_lossy(&data[..8]).trim_end_matches(['\0', ' ']).to_string();
            let controllers = data[8..].chunks_exact(POR_ENTRY_BYTES).map(|e| (u16_at(e, 0), u32_at(e, 16), u64_at(e, 20), e[3])).collect();
            out.power_on_resets.push(PowerOnReset { timestamp: u64_at(b, at + 6), firmware, controllers });
        }
        at = next;
    }
    Ok(out)
}

/// Judges the log read after a cycle of `cuts` power cuts (1: a single cut, exactly one
/// power cycle recorded; more, with cuts while the drive recovered: from one to `cuts`, as a
/// cut before the drive loaded its counters may go unrecorded) against the one read before:
/// the header's power cycle count must advance by that much, and the new power-on or reset
/// events must record as many power cycles (the distinct controller power cycles their
/// entries name past the count before: a controller reset the host's driver makes after
/// power-on may add an event of the same power cycle). Nothing new at all is a cut the drive
/// never saw (a relay that clicked but cut nothing).
pub fn judge_pel(before: &PelSummary, after: &PelSummary, cuts: u32) -> Vec<HealthAnomaly> {
    let advanced = after.power_cycle_count.saturating_sub(before.power_cycle_count);
    let seen: std::collections::HashSet<&PowerOnReset> = before.power_on_resets.iter().collect();
    let logged: std::collections::BTreeSet<u32> = after
        .power_on_resets
        .iter()
        .filter(|e| !seen.contains(e))
        .flat_map(|e| e.controllers.iter().map(|c| c.1))
        .filter(|cpc| u64::from(*cpc) > before.power_cycle_count)
        .collect();
    let logged = logged.len() as u64;
    let want = if cuts <= 1 { 1..=1 } else { 1..=u64::from(cuts) };
    if want.contains(&advanced) && logged == advanced {
        return Vec::new();
    }
    vec![HealthAnomaly::PowerCycleNotLogged {
        cuts,
        power_cycles_before: before.power_cycle_count,
        power_cycles_after: after.power_cycle_count,
        new_power_on_events: logged,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log built from the specification's layout: the header, then `events` (type, vendor
    /// bytes, data).
    pub(crate) fn log(pcc: u64, events: &[(u8, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES];
        b[0] = LID_PEL;
        b[4..8].copy_from_slice(&(events.len() as u32).to_le_bytes());
        b[18..20].copy_from_slice(&492u16.to_le_bytes());
        b[44..52].copy_from_slice(&pcc.to_le_bytes());
        b[372..374].copy_from_slice(&7u16.to_le_bytes());
        for (i, (kind, vendor, data)) in events.iter().enumerate() {
            let mut h = [0u8; 24];
            h[0] = *kind;
            h[2] = 21;
            h[4..6].copy_from_slice(&1u16.to_le_bytes());
            h[6..14].copy_from_slice(&(1000 + i as u64).to_le_bytes());
            h[20..22].copy_from_slice(&(vendor.len() as u16).to_le_bytes());
            h[22..24].copy_from_slice(&((vendor.len() + data.len()) as u16).to_le_bytes());
            b.extend_from_slice(&h);
            b.extend_from_slice(vendor);
            b.extend_from_slice(data);
        }
        let tll = b.len() as u64;
        b[8..16].copy_from_slice(&tll.to_le_bytes());
        b
    }

    /// A power-on or reset event's data: firmware, one controller entry.
    pub(crate) fn por(cpc: u32, ms: u64) -> Vec<u8> {
        let mut d = b"FW1.2\0\0\0".to_vec();
        let mut e = [0u8; POR_ENTRY_BYTES];
        e[0..2].copy_from_slice(&1u16.to_le_bytes());
        e[3] = 1;
        e[16..20].copy_from_slice(&cpc.to_le_bytes());
        e[20..28].copy_from_slice(&ms.to_le_bytes());
        d.extend_from_slice(&e);
        d
    }

    #[test]
    fn the_header_and_power_on_events_are_read_past_vendor_bytes_and_other_events() {
        let smart = vec![0u8; 512];
        let b = log(
            42,
            &[(0x01, vec![], smart), (EVENT_POWER_ON_RESET, vec![0xAA; 8], por(41, 5)), (EVENT_POWER_ON_RESET, vec![], por(42, 9))],
        );
        let p = parse_pel(&b).unwrap();
        assert_eq!((p.power_cycle_count, p.generation, p.events), (42, 7, 3));
        assert_eq!(p.power_on_resets.len(), 2);
        // The vendor bytes come before the data: the firmware is read after them.
        assert_eq!(p.power_on_resets[0].firmware, "FW1.2");
        assert_eq!(p.power_on_resets[0].controllers, vec![(1, 41, 5, 1)]);
        assert_eq!(p.power_on_resets[1].controllers, vec![(1, 42, 9, 1)]);
        assert_eq!(p.power_on_resets[1].timestamp, 1002);
        assert_eq!(total_length(&b).unwrap(), b.len() as u64);
    }

    #[test]
    fn what_is_wrong_is_named_with_where() {
        assert_eq!(parse_pel(&[0u8; 100]).unwrap_err(), PelError::Short { got: 100 });
        let mut b = log(1, &[]);
        b[0] = 0x02;
        assert_eq!(parse_pel(&b).unwrap_err(), PelError::Identifier(2));
        let mut b = log(1, &[(EVENT_POWER_ON_RESET, vec![], por(1, 1))]);
        b[512 + 22] = 200; // EL past the end
        let e = parse_pel(&b).unwrap_err().to_string();
        assert!(e.contains("event 0 at byte 512") && e.contains("past the log's end"), "{e}");
        let mut b = log(1, &[(EVENT_POWER_ON_RESET, vec![], por(1, 1))]);
        b[512 + 20] = 250; // VSIL above EL
        assert!(parse_pel(&b).unwrap_err().to_string().contains("vendor-specific information of 250 bytes"));
        let mut b = log(1, &[(EVENT_POWER_ON_RESET, vec![], por(1, 1))]);
        b[512 + 2] = 3;
        assert!(parse_pel(&b).unwrap_err().to_string().contains("at least 24 bytes"));
        let mut b = log(1, &[(EVENT_POWER_ON_RESET, vec![], vec![0; 4])]);
        b[512 + 22] = 4;
        assert!(parse_pel(&b).unwrap_err().to_string().contains("firmware revision alone is 8"));
        let mut b = log(1, &[]);
        b[18..20].copy_from_slice(&600u16.to_le_bytes());
        assert!(matches!(parse_pel(&b).unwrap_err(), PelError::HeaderLength { lhl: 600, .. }));
        // Fewer bytes than TNEV promises: what is there is read.
        let b = log(3, &[(EVENT_POWER_ON_RESET, vec![], por(3, 1))]);
        let mut short = b.clone();
        short[4..8].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(parse_pel(&short).unwrap().power_on_resets.len(), 1);
    }

    #[test]
    fn each_cut_must_add_one_power_on_event_and_advance_the_count() {
        let before = parse_pel(&log(10, &[(EVENT_POWER_ON_RESET, vec![], por(10, 1))])).unwrap();
        let one = parse_pel(&log(11, &[(EVENT_POWER_ON_RESET, vec![], por(10, 1)), (EVENT_POWER_ON_RESET, vec![], por(11, 2))])).unwrap();
        assert!(judge_pel(&before, &one, 1).is_empty());
        // A relay that clicked but cut nothing: the drive saw no power cycle.
        let anomalies = judge_pel(&before, &before, 1);
        assert_eq!(
            anomalies,
            vec![HealthAnomaly::PowerCycleNotLogged { cuts: 1, power_cycles_before: 10, power_cycles_after: 10, new_power_on_events: 0 }]
        );
        // The count moved without its event, or two cycles for one cut.
        let no_event = parse_pel(&log(11, &[(EVENT_POWER_ON_RESET, vec![], por(10, 1))])).unwrap();
        assert_eq!(judge_pel(&before, &no_event, 1).len(), 1);
        let two = parse_pel(&log(
            12,
            &[
                (EVENT_POWER_ON_RESET, vec![], por(10, 1)),
                (EVENT_POWER_ON_RESET, vec![], por(11, 2)),
                (EVENT_POWER_ON_RESET, vec![], por(12, 3)),
            ],
        ))
        .unwrap();
        assert_eq!(judge_pel(&before, &two, 1).len(), 1);
        // Three cuts, two of them while the drive recovered: two or three recorded is fine.
        assert!(judge_pel(&before, &two, 3).is_empty());
        assert_eq!(judge_pel(&before, &before, 3).len(), 1);
        // The oldest events gone (the log wraps): only the new ones count.
        let wrapped = parse_pel(&log(11, &[(EVENT_POWER_ON_RESET, vec![], por(11, 2))])).unwrap();
        assert!(judge_pel(&before, &wrapped, 1).is_empty());
        // The host's driver reset the controller after power-on: a second event of the same
        // power cycle is still one power cycle.
        let reset_too =
            parse_pel(&log(11, &[(EVENT_POWER_ON_RESET, vec![], por(11, 2)), (EVENT_POWER_ON_RESET, vec![], por(11, 40))])).unwrap();
        assert!(judge_pel(&before, &reset_too, 1).is_empty());
    }
}
