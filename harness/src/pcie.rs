//! The PCIe link's health around a fault, read from sysfs (the kernel's
//! `Documentation/ABI/testing/sysfs-bus-pci`) for an NVMe controller's PCI function:
//! `current_link_speed` ("8.0 GT/s PCIe"), `current_link_width` ("4"), and the AER counters
//! `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` (one "NAME COUNT" line per error,
//! the last `TOTAL_ERR_COR`, `TOTAL_ERR_NONFATAL`, `TOTAL_ERR_FATAL`; present only where the
//! function has AER and the kernel reports it), and the controller's CAP.TO (CAP bits 31:24,
//! in 500 ms units: the longest it may take to become ready), through BAR0.
//!
//! After every fault the link must come back at the speed and width it had, with no AER error
//! counted, and the device must answer within CAP.TO. Each is a health anomaly: the data is
//! intact, but a link that trains down or throws errors across a reset is the drive's (or the
//! slot's) fault a test plan must see; anomalies count in the cycle's verdict like findings,
//! and `[health] off` turns a check off (named in the run's notes) for a platform that cannot
//! keep it. What a counter or file the function does not have is never judged.

use crate::health::HealthAnomaly;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// What sysfs says of the link, and the controller's readiness bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieHealth {
    pub link_speed: Option<String>,
    pub link_width: Option<u32>,
    /// AER totals: correctable, non-fatal, fatal.
    pub aer: [Option<u64>; 3],
    /// CAP.TO, in ms.
    pub ready_timeout_ms: Option<u64>,
}

/// The AER counter files, and what their totals are called.
const AER: [(&str, &str, &str); 3] = [
    ("aer_dev_correctable", "TOTAL_ERR_COR", "correctable"),
    ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL", "non-fatal"),
    ("aer_dev_fatal", "TOTAL_ERR_FATAL", "fatal"),
];

/// The total of an AER counter file's text (its `TOTAL_...` line, else the sum of its lines).
pub fn aer_total(text: &str, total: &str) -> Option<u64> {
    let mut sum: Option<u64> = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(name), Some(n)) = (it.next(), it.next()) else { continue };
        let Ok(n) = n.parse::<u64>() else { continue };
        if name == total {
            return Some(n);
        }
        sum = Some(sum.unwrap_or(0).saturating_add(n));
    }
    sum
}

/// CAP.TO of a CAP register value, in ms.
pub fn ready_timeout_ms(cap: u64) -> u64 {
    ((cap >> 24) & 0xFF) * 500
}

/// Reads NVMe controller `ctrl`'s PCI function under the sysfs root `sys`: what is missing or
/// unreadable is `None`.
pub fn read_pcie(sys: &Path, ctrl: &str) -> PcieHealth {
    let dir = sys.join("class/nvme").join(ctrl).join("device");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_string());
    let link_speed = read("current_link_speed").filter(|s| !s.is_empty() && s != "Unknown");
    let link_width = read("current_link_width").and_then(|s| s.parse().ok()).filter(|w| *w > 0);
    let aer = AER.map(|(file, total, _)| read(file).and_then(|t| aer_total(&t, total)));
    let ready_timeout_ms = faultline_drivers::control::linux::controller_cap(sys, ctrl).ok().map(ready_timeout_ms).filter(|ms| *ms > 0);
    PcieHealth { link_speed, link_width, aer, ready_timeout_ms }
}

/// Judges the link after a fault against before it: the same speed and width, no AER error
/// counted. What either reading lacks is not judged.
pub fn judge_link(before: &PcieHealth, after: &PcieHealth) -> Vec<HealthAnomaly> {
    let mut out = Vec::new();
    let speed = (before.link_speed.as_ref(), after.link_speed.as_ref());
    let width = (before.link_width, after.link_width);
    let changed = matches!(speed, (Some(a), Some(b)) if a != b) || matches!(width, (Some(a), Some(b)) if a != b);
    if changed {
        out.push(HealthAnomaly::LinkChanged {
            before: format!("{} x{}", speed.0.map_or("?", String::as_str), width.0.map_or("?".into(), |w| w.to_string())),
            after: format!("{} x{}", speed.1.map_or("?", String::as_str), width.1.map_or("?".into(), |w| w.to_string())),
        });
    }
    for (i, (_, _, kind)) in AER.iter().enumerate() {
        if let (Some(b), Some(a)) = (before.aer[i], after.aer[i]) {
            if a > b {
                out.push(HealthAnomaly::AerErrors { severity: (*kind).to_string(), before: b, after: a });
            }
        }
    }
    out
}

/// Judges how long the device took to answer again against the controller's CAP.TO.
pub fn judge_ready(health: &PcieHealth, took: Duration) -> Option<HealthAnomaly> {
    let bound = health.ready_timeout_ms?;
    let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
    (ms > bound).then_some(HealthAnomaly::ReadyBeyondTimeout { ready_ms: ms, cap_to_ms: bound })
}

#[cfg(test)]
mod tests {
    use super::*;

    const COR: &str = "RxErr 0\nBadTLP 2\nBadDLLP 0\nRollover 0\nTimeout 1\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n";

    #[test]
    fn aer_totals_and_cap_to_are_read_from_the_kernels_text_and_the_register() {
        assert_eq!(aer_total(COR, "TOTAL_ERR_COR"), Some(3));
        // An older kernel without the total line: the lines summed.
        assert_eq!(aer_total("RxErr 1\nBadTLP 2\n", "TOTAL_ERR_COR"), Some(3));
        assert_eq!(aer_total("", "TOTAL_ERR_COR"), None);
        assert_eq!(aer_total("garbage here\n", "TOTAL_ERR_COR"), None);
        // QEMU's CAP: TO = 0x0f, 7.5 s.
        assert_eq!(ready_timeout_ms(0x0000_0040_0f01_07ff), 7500);
    }

    #[test]
    fn a_link_that_trains_down_or_counts_errors_is_an_anomaly_and_what_is_missing_is_not_judged() {
        let start = PcieHealth {
            link_speed: Some("16.0 GT/s PCIe".into()),
            link_width: Some(4),
            aer: [Some(0), Some(0), Some(0)],
            ready_timeout_ms: Some(7500),
        };
        assert!(judge_link(&start, &start.clone()).is_empty());
        let down = PcieHealth { link_speed: Some("8.0 GT/s PCIe".into()), link_width: Some(2), ..start.clone() };
        assert_eq!(
            judge_link(&start, &down),
            vec![HealthAnomaly::LinkChanged { before: "16.0 GT/s PCIe x4".into(), after: "8.0 GT/s PCIe x2".into() }]
        );
        let errors = PcieHealth { aer: [Some(2), Some(0), Some(1)], ..start.clone() };
        let got = judge_link(&start, &errors);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(matches!(&got[0], HealthAnomaly::AerErrors { severity, before: 0, after: 2 } if severity == "correctable"));
        assert!(matches!(&got[1], HealthAnomaly::AerErrors { severity, before: 0, after: 1 } if severity == "fatal"));
        assert!(judge_link(&PcieHealth::default(), &down).is_empty(), "nothing known before: nothing judged");
        assert_eq!(
            judge_ready(&start, Duration::from_millis(7600)),
            Some(HealthAnomaly::ReadyBeyondTimeout { ready_ms: 7600, cap_to_ms: 7500 })
        );
        assert_eq!(judge_ready(&start, Duration::from_millis(200)), None);
        assert_eq!(judge_ready(&PcieHealth::default(), Duration::from_secs(100)), None);
    }

    #[test]
    fn a_function_is_read_from_its_sysfs_files() {
        let root = std::env::temp_dir().join(format!("faultline-pcie-{}", std::process::id()));
        let dev = root.join("class/nvme/nvme0/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("current_link_speed"), "8.0 GT/s PCIe\n").unwrap();
        std::fs::write(dev.join("current_link_width"), "4\n").unwrap();
        std::fs::write(dev.join("aer_dev_correctable"), COR).unwrap();
        let mut bar = vec![0u8; 4096];
        bar[..8].copy_from_slice(&0x0000_0040_1e01_07ffu64.to_le_bytes());
        std::fs::write(dev.join("resource0"), bar).unwrap();
        let h = read_pcie(&root, "nvme0");
        assert_eq!(
            h,
            PcieHealth {
                link_speed: Some("8.0 GT/s PCIe".into()),
                link_width: Some(4),
                aer: [Some(3), None, None],
                ready_timeout_ms: Some(15_000)
            }
        );
        assert_eq!(read_pcie(&root, "nvme9"), PcieHealth::default());
        let _ = std::fs::remove_dir_all(&root);
    }
}
