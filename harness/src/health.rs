//! NVMe health logs, parsed from bytes, and the checks a power-cut cycle makes on them.
//!
//! Pure functions over the 512-byte log pages (the cycle runner fetches them through the
//! admin passthrough ioctl), so they are tested here against hand-built pages.
//!
//! SMART / health information (log 0x02, NVMe base specification; docs/DOMAIN.md section 6):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | critical warning (bit 0 spare, 1 temperature, 2 reliability, 3 read-only, 4 volatile memory backup, i.e. the PLP capacitor, failed) |
//! | 1..3 | composite temperature, kelvin |
//! | 3, 4, 5 | available spare %, spare threshold %, percentage used |
//! | 32..48, 48..64 | data units read / written (1000 x 512 bytes) |
//! | 112..128 | power cycles |
//! | 128..144 | power-on hours |
//! | 144..160 | unsafe shutdowns (not 112..128: pynvme's mistake) |
//! | 160..176 | media and data integrity errors |
//! | 176..192 | error information log entries |
//!
//! All counters are 128-bit little-endian. OCP datacenter SMART extended log (0xC0): incomplete
//! shutdowns at 112..116 (u32), capacitor health at 128..130 (u16, %), PLP start count at
//! 160..176 (u128).

use serde::{Deserialize, Serialize};

pub const LOG_BYTES: usize = 512;

/// Critical-warning bit: the volatile memory backup device (PLP capacitor) failed.
pub const CW_PLP_FAILED: u8 = 1 << 4;
/// Critical-warning bit: the device is read-only.
pub const CW_READ_ONLY: u8 = 1 << 3;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartLog {
    pub critical_warning: u8,
    pub temperature_k: u16,
    pub available_spare_pct: u8,
    pub spare_threshold_pct: u8,
    pub percentage_used: u8,
    pub data_units_read: u128,
    pub data_units_written: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    pub media_errors: u128,
    pub error_log_entries: u128,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OcpSmartLog {
    pub incomplete_shutdowns: u32,
    pub capacitor_health_pct: u16,
    pub plp_start_count: u128,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HealthError {
    #[error("{log}: {got} bytes, a log page is {LOG_BYTES}")]
    Length { log: &'static str, got: usize },
}

fn u128_at(b: &[u8], off: usize) -> u128 {
    u128::from_le_bytes(b[off..off + 16].try_into().expect("16 bytes"))
}

/// Parses a SMART / health information log page.
pub fn parse_smart(b: &[u8]) -> Result<SmartLog, HealthError> {
    if b.len() != LOG_BYTES {
        return Err(HealthError::Length { log: "SMART / health log (0x02)", got: b.len() });
    }
    Ok(SmartLog {
        critical_warning: b[0],
        temperature_k: u16::from_le_bytes([b[1], b[2]]),
        available_spare_pct: b[3],
        spare_threshold_pct: b[4],
        percentage_used: b[5],
        data_units_read: u128_at(b, 32),
        data_units_written: u128_at(b, 48),
        power_cycles: u128_at(b, 112),
        power_on_hours: u128_at(b, 128),
        unsafe_shutdowns: u128_at(b, 144),
        media_errors: u128_at(b, 160),
        error_log_entries: u128_at(b, 176),
    })
}

/// Parses the OCP datacenter SMART extended log page (0xC0).
pub fn parse_ocp_smart(b: &[u8]) -> Result<OcpSmartLog, HealthError> {
    if b.len() != LOG_BYTES {
        return Err(HealthError::Length { log: "OCP SMART extended log (0xC0)", got: b.len() });
    }
    Ok(OcpSmartLog {
        incomplete_shutdowns: u32::from_le_bytes(b[112..116].try_into().expect("4 bytes")),
        capacitor_health_pct: u16::from_le_bytes([b[128], b[129]]),
        plp_start_count: u128_at(b, 160),
    })
}

/// How the power went away in the cycle being judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shutdown {
    /// Power cut with I/O in flight: the drive must count one unsafe shutdown.
    Dirty,
    /// The cycle's cut and more while the drive recovered, this many in all: the drive must
    /// count at least one unsafe shutdown and at most one per cut (a cut before the drive
    /// loaded its counters may go uncounted).
    Repeated(u32),
    /// Clean shutdown through the controller (the control case): it must count none.
    Clean,
}

/// Something the health logs say is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HealthAnomaly {
    /// The unsafe-shutdown count did not rise by exactly one across a dirty cut (by 1 to
    /// `cuts` across that many).
    UnsafeShutdownsAfterDirtyCut {
        cuts: u32,
        before: u128,
        after: u128,
    },
    /// The unsafe-shutdown count rose across a clean shutdown.
    UnsafeShutdownsAfterCleanShutdown {
        before: u128,
        after: u128,
    },
    /// Critical-warning bits that were clear before the cycle are set after it.
    CriticalWarning {
        new_bits: u8,
        meaning: String,
    },
    MediaErrorsGrew {
        before: u128,
        after: u128,
    },
    ErrorLogGrew {
        before: u128,
        after: u128,
    },
    /// The OCP log's PLP start count did not rise across a dirty cut.
    PlpNotStarted {
        before: u128,
        after: u128,
    },
    /// The Persistent Event Log does not show the cycle's `cuts` power cycles: its power cycle
    /// count did not advance by one per cut (by one to `cuts` with cuts while the drive
    /// recovered), or its new power-on events do not record as many power cycles
    /// (`new_power_on_events`: the distinct ones they record; `crate::pel`).
    PowerCycleNotLogged {
        cuts: u32,
        power_cycles_before: u64,
        power_cycles_after: u64,
        new_power_on_events: u64,
    },
    /// The PCIe link came back at another speed or width (`crate::pcie`).
    LinkChanged {
        before: String,
        after: String,
    },
    /// An AER counter of the drive's PCI function grew across the fault.
    AerErrors {
        severity: String,
        before: u64,
        after: u64,
    },
    /// The device answered again later than its controller's CAP.TO allows.
    ReadyBeyondTimeout {
        ready_ms: u64,
        cap_to_ms: u64,
    },
}

/// One check of the health logs, as a scenario's `[health] off` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthCheck {
    /// One more unsafe shutdown across a dirty cut, none across a clean shutdown.
    UnsafeShutdowns,
    /// No critical-warning bit newly set.
    CriticalWarning,
    /// No growth of the media-error count.
    MediaErrors,
    /// No growth of the error-information log.
    ErrorLog,
    /// The OCP log's PLP start count rises across a dirty cut.
    PlpStarted,
    /// The Persistent Event Log records each power cut: one power-on event and the power cycle
    /// count advanced.
    PowerCycleLogged,
    /// The PCIe link comes back at the speed and width it had.
    LinkSpeedWidth,
    /// No AER error is counted across a fault.
    AerErrors,
    /// The device answers again within its controller's CAP.TO.
    ReadyWithinTimeout,
}

impl HealthCheck {
    pub fn name(self) -> &'static str {
        match self {
            HealthCheck::UnsafeShutdowns => "unsafe_shutdowns",
            HealthCheck::CriticalWarning => "critical_warning",
            HealthCheck::MediaErrors => "media_errors",
            HealthCheck::ErrorLog => "error_log",
            HealthCheck::PlpStarted => "plp_started",
            HealthCheck::PowerCycleLogged => "power_cycle_logged",
            HealthCheck::LinkSpeedWidth => "link_speed_width",
            HealthCheck::AerErrors => "aer_errors",
            HealthCheck::ReadyWithinTimeout => "ready_within_timeout",
        }
    }

    /// The check an anomaly breaks.
    pub fn of(a: &HealthAnomaly) -> HealthCheck {
        match a {
            HealthAnomaly::UnsafeShutdownsAfterDirtyCut { .. } | HealthAnomaly::UnsafeShutdownsAfterCleanShutdown { .. } => {
                HealthCheck::UnsafeShutdowns
            }
            HealthAnomaly::CriticalWarning { .. } => HealthCheck::CriticalWarning,
            HealthAnomaly::MediaErrorsGrew { .. } => HealthCheck::MediaErrors,
            HealthAnomaly::ErrorLogGrew { .. } => HealthCheck::ErrorLog,
            HealthAnomaly::PlpNotStarted { .. } => HealthCheck::PlpStarted,
            HealthAnomaly::PowerCycleNotLogged { .. } => HealthCheck::PowerCycleLogged,
            HealthAnomaly::LinkChanged { .. } => HealthCheck::LinkSpeedWidth,
            HealthAnomaly::AerErrors { .. } => HealthCheck::AerErrors,
            HealthAnomaly::ReadyBeyondTimeout { .. } => HealthCheck::ReadyWithinTimeout,
        }
    }
}

/// What the platform is allowed to get wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthPolicy {
    /// Tolerate one extra unsafe shutdown counted on a clean shutdown (a known Linux race
    /// makes clean shutdowns look unsafe on some platforms).
    pub allow_clean_bump: bool,
    /// Report growth of the error-information log (noisy on some drives).
    pub report_error_log_growth: bool,
}

/// Compares the logs read before and after one cycle.
pub fn judge(before: &SmartLog, after: &SmartLog, how: Shutdown, policy: HealthPolicy) -> Vec<HealthAnomaly> {
    let mut out = Vec::new();
    let (b, a) = (before.unsafe_shutdowns, after.unsafe_shutdowns);
    match how {
        Shutdown::Dirty if a != b.saturating_add(1) => {
            out.push(HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts: 1, before: b, after: a })
        }
        Shutdown::Repeated(cuts) if a <= b || a > b.saturating_add(u128::from(cuts)) => {
            out.push(HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts, before: b, after: a })
        }
        Shutdown::Clean if a > b.saturating_add(u128::from(policy.allow_clean_bump)) || a < b => {
            out.push(HealthAnomaly::UnsafeShutdownsAfterCleanShutdown { before: b, after: a })
        }
        _ => {}
    }
    let new_bits = after.critical_warning & !before.critical_warning;
    if new_bits != 0 {
        out.push(HealthAnomaly::CriticalWarning { new_bits, meaning: critical_warning_meaning(new_bits) });
    }
    if after.media_errors > before.media_errors {
        out.push(HealthAnomaly::MediaErrorsGrew { before: before.media_errors, after: after.media_errors });
    }
    if policy.report_error_log_growth && after.error_log_entries > before.error_log_entries {
        out.push(HealthAnomaly::ErrorLogGrew { before: before.error_log_entries, after: after.error_log_entries });
    }
    out
}

/// Compares OCP extended logs across a dirty cut: a PLP drive must have started its
/// power-loss protection.
pub fn judge_ocp(before: &OcpSmartLog, after: &OcpSmartLog, how: Shutdown) -> Vec<HealthAnomaly> {
    match how {
        Shutdown::Dirty | Shutdown::Repeated(_) if after.plp_start_count <= before.plp_start_count => {
            vec![HealthAnomaly::PlpNotStarted { before: before.plp_start_count, after: after.plp_start_count }]
        }
        _ => Vec::new(),
    }
}

/// Names the critical-warning bits set in `bits`.
pub fn critical_warning_meaning(bits: u8) -> String {
    const NAMES: [&str; 6] = [
        "available spare below threshold",
        "temperature out of range",
        "reliability degraded",
        "read-only",
        "volatile memory backup (PLP capacitor) failed",
        "persistent memory region read-only",
    ];
    let names: Vec<&str> = (0..8).filter(|i| bits & (1 << i) != 0).map(|i| NAMES.get(i).copied().unwrap_or("reserved bit")).collect();
    names.join(", ")
}

/// The health logs as read after a cycle.
#[derive(Clone, Debug)]
pub struct HealthLogs {
    pub smart: SmartLog,
    pub ocp: Option<OcpSmartLog>,
    /// The Persistent Event Log's power cycles, where the drive has the log.
    pub pel: Option<crate::pel::PelSummary>,
    /// Why the drive's Persistent Event Log could not be read or parsed, where it has one (its
    /// SMART checks go on without it).
    pub pel_unread: Option<String>,
    /// The PCIe link and CAP.TO, for a controller on PCIe.
    pub pcie: Option<crate::pcie::PcieHealth>,
}

/// The health logs could not be read: the admin command, or what it returned.
#[derive(Debug, thiserror::Error)]
pub enum HealthReadError {
    #[error(transparent)]
    Admin(#[from] faultline_drivers::nvme::NvmeError),
    #[error(transparent)]
    Parse(#[from] HealthError),
    /// A port on another host: what its agent said.
    #[error("{0}")]
    Remote(String),
    /// A port on another host: its agent sent a page that is not hex.
    #[error("the agent sent a health page that is not hex")]
    NotHex,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built health page: the counters at their specification offsets.
    fn page(cw: u8, unsafe_shutdowns: u128, media: u128, errors: u128) -> Vec<u8> {
        let mut b = vec![0u8; LOG_BYTES];
        b[0] = cw;
        b[1..3].copy_from_slice(&318u16.to_le_bytes());
        b[3] = 100;
        b[4] = 10;
        b[5] = 3;
        b[48..64].copy_from_slice(&123_456u128.to_le_bytes());
        b[112..128].copy_from_slice(&40u128.to_le_bytes());
        b[128..144].copy_from_slice(&9_000u128.to_le_bytes());
        b[144..160].copy_from_slice(&unsafe_shutdowns.to_le_bytes());
        b[160..176].copy_from_slice(&media.to_le_bytes());
        b[176..192].copy_from_slice(&errors.to_le_bytes());
        b
    }

    #[test]
    fn fields_come_from_their_offsets() {
        let s = parse_smart(&page(0, 17, 2, 5)).unwrap();
        assert_eq!((s.temperature_k, s.available_spare_pct, s.spare_threshold_pct, s.percentage_used), (318, 100, 10, 3));
        assert_eq!((s.data_units_written, s.power_cycles, s.power_on_hours), (123_456, 40, 9_000));
        // The unsafe-shutdown count is bytes 144..160, not the power cycles at 112..128.
        assert_eq!((s.unsafe_shutdowns, s.media_errors, s.error_log_entries), (17, 2, 5));
        let big = u128::MAX - 1;
        assert_eq!(parse_smart(&page(0, big, 0, 0)).unwrap().unsafe_shutdowns, big, "all 128 bits");
        assert_eq!(parse_smart(&[0u8; 511]).unwrap_err(), HealthError::Length { log: "SMART / health log (0x02)", got: 511 });
    }

    #[test]
    fn dirty_cuts_must_count_exactly_one_unsafe_shutdown() {
        let p = HealthPolicy::default();
        let b = parse_smart(&page(0, 10, 0, 0)).unwrap();
        assert!(judge(&b, &parse_smart(&page(0, 11, 0, 0)).unwrap(), Shutdown::Dirty, p).is_empty());
        for after in [10, 12] {
            let a = parse_smart(&page(0, after, 0, 0)).unwrap();
            assert_eq!(judge(&b, &a, Shutdown::Dirty, p), vec![HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts: 1, before: 10, after }]);
        }
    }

    #[test]
    fn repeated_cuts_must_count_at_least_one_and_at_most_one_each() {
        let p = HealthPolicy::default();
        let b = parse_smart(&page(0, 10, 0, 0)).unwrap();
        for after in [11, 12, 13] {
            assert!(judge(&b, &parse_smart(&page(0, after, 0, 0)).unwrap(), Shutdown::Repeated(3), p).is_empty(), "+{}", after - 10);
        }
        for after in [10, 14] {
            let a = parse_smart(&page(0, after, 0, 0)).unwrap();
            let got = judge(&b, &a, Shutdown::Repeated(3), p);
            assert_eq!(got, vec![HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts: 3, before: 10, after }]);
            assert!(crate::events::HealthNote::from(&got[0]).detail.contains("across 3 dirty cuts (must be +1 to +3)"));
        }
    }

    #[test]
    fn clean_shutdowns_must_count_none_unless_the_platform_is_excused() {
        let b = parse_smart(&page(0, 10, 0, 0)).unwrap();
        let bumped = parse_smart(&page(0, 11, 0, 0)).unwrap();
        assert!(judge(&b, &b, Shutdown::Clean, HealthPolicy::default()).is_empty());
        assert_eq!(
            judge(&b, &bumped, Shutdown::Clean, HealthPolicy::default()),
            vec![HealthAnomaly::UnsafeShutdownsAfterCleanShutdown { before: 10, after: 11 }]
        );
        let lenient = HealthPolicy { allow_clean_bump: true, ..HealthPolicy::default() };
        assert!(judge(&b, &bumped, Shutdown::Clean, lenient).is_empty());
        let twice = parse_smart(&page(0, 12, 0, 0)).unwrap();
        assert_eq!(judge(&b, &twice, Shutdown::Clean, lenient).len(), 1);
    }

    #[test]
    fn new_warnings_and_growing_error_counts_are_reported() {
        let b = parse_smart(&page(CW_READ_ONLY, 10, 1, 4)).unwrap();
        let a = parse_smart(&page(CW_READ_ONLY | CW_PLP_FAILED, 11, 3, 6)).unwrap();
        let got = judge(&b, &a, Shutdown::Dirty, HealthPolicy { report_error_log_growth: true, ..HealthPolicy::default() });
        assert_eq!(
            got,
            vec![
                HealthAnomaly::CriticalWarning { new_bits: CW_PLP_FAILED, meaning: "volatile memory backup (PLP capacitor) failed".into() },
                HealthAnomaly::MediaErrorsGrew { before: 1, after: 3 },
                HealthAnomaly::ErrorLogGrew { before: 4, after: 6 },
            ]
        );
        assert_eq!(judge(&b, &a, Shutdown::Dirty, HealthPolicy::default()).len(), 2, "error-log growth only when asked");
    }

    #[test]
    fn ocp_log_fields_and_plp_start() {
        let mut p = vec![0u8; LOG_BYTES];
        p[112..116].copy_from_slice(&7u32.to_le_bytes());
        p[128..130].copy_from_slice(&96u16.to_le_bytes());
        p[160..176].copy_from_slice(&33u128.to_le_bytes());
        let b = parse_ocp_smart(&p).unwrap();
        assert_eq!(b, OcpSmartLog { incomplete_shutdowns: 7, capacitor_health_pct: 96, plp_start_count: 33 });
        let mut a = b.clone();
        assert_eq!(judge_ocp(&b, &a, Shutdown::Dirty), vec![HealthAnomaly::PlpNotStarted { before: 33, after: 33 }]);
        assert!(judge_ocp(&b, &a, Shutdown::Clean).is_empty());
        a.plp_start_count = 34;
        assert!(judge_ocp(&b, &a, Shutdown::Dirty).is_empty());
    }
}
