//! The atomic write unit a device is held to: the scenario's `target.atomic_bytes` when it
//! declares one; else what an NVMe namespace declares (NAWUPF + 1 blocks, where NSFEAT's
//! NATOMIC says the field is defined, cut to fit its NABSPF boundaries); else one logical
//! sector (Linux's rule since "nvme: stop using AWUPF": NAWUPF alone, else one block). The
//! note the run records says which, with the drive's fields (AWUPF for the record).
//!
//! The verifier holds the drive to units of this size aligned to offset 0. A namespace whose
//! writes are atomic up to NAWUPF anywhere (no boundary) promises more than that; one with
//! boundaries promises it only for writes that cross none, so the unit is the greatest common
//! divisor of NAWUPF, the boundary and its offset: the units never cross a boundary.

use super::error::AtomicBelowSector;
use faultline_drivers::blockdev::SysRoots;
use faultline_drivers::nvme::{namespace_id, NamespaceIdentity, NvmeAdmin, NvmeError};
use std::path::Path;

/// What an NVMe namespace declares of its atomicity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Declared {
    pub ns: NamespaceIdentity,
    /// The controller's AWUPF (`None`: Identify Controller failed).
    pub awupf: Option<u16>,
}

/// What the NVMe namespace at `path` declares; `Ok(None)` for a device that is not an NVMe
/// namespace (a loop device, a file, a SCSI disk).
pub(crate) fn declared(path: &Path, roots: &SysRoots) -> Result<Option<Declared>, NvmeError> {
    let nsid = match namespace_id(path, roots) {
        Ok(n) => n,
        Err(NvmeError::NotNvme { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let admin = match NvmeAdmin::open_for_block_device_in(path, roots) {
        Ok(a) => a,
        Err(NvmeError::NotNvme { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let ns = admin.identify_namespace(nsid)?;
    let awupf = admin.identify().ok().map(|c| c.awupf);
    Ok(Some(Declared { ns, awupf }))
}

/// What a deallocated sector reads, where the namespace declares it in DLFEAT (`None`: not
/// reported, or not an NVMe namespace), and the note saying so.
pub(crate) fn declared_reads(drive: Option<&Declared>) -> (Option<crate::ledger::DeallocRead>, Option<String>) {
    use crate::ledger::DeallocRead;
    use faultline_drivers::nvme::DeallocatedReads;
    let Some(d) = drive else { return (None, None) };
    let reads = match d.ns.deallocated_reads() {
        DeallocatedReads::Zeros => Some(DeallocRead::Zeros),
        DeallocatedReads::Ones => Some(DeallocRead::Ones),
        DeallocatedReads::NotReported => None,
    };
    let said = match reads {
        Some(r) => format!(
            "deallocated sectors held to read {}: the namespace's DLFEAT {:#04x}",
            if r == DeallocRead::Zeros { "zeros" } else { "FFh" },
            d.ns.dlfeat
        ),
        None => format!(
            "deallocated sectors may read zeros, FFh or the data last written: the namespace's DLFEAT {:#04x} reports nothing",
            d.ns.dlfeat
        ),
    };
    (reads, Some(said))
}

/// The unit the run holds the device to, and the note saying where it came from.
pub(crate) fn atomic_unit(
    scenario: Option<u32>,
    sector: u64,
    drive: Option<&Declared>,
) -> Result<(u64, Option<String>), AtomicBelowSector> {
    let fields = drive.map(fields);
    let unit = match (scenario.map(u64::from), drive.and_then(|d| drive_unit(d, sector))) {
        (Some(d), _) if d < sector => return Err(AtomicBelowSector { declared: d, sector }),
        (Some(d), _) => (d, fields.map(|f| format!("atomic unit {d} bytes: the scenario's target.atomic_bytes (the drive declares {f})"))),
        (None, Some(u)) => (u, fields.map(|f| format!("atomic unit {u} bytes: the drive's own ({f})"))),
        (None, None) => {
            (sector, fields.map(|f| format!("atomic unit {sector} bytes, one logical block: the namespace declares no NAWUPF ({f})")))
        }
    };
    Ok(unit)
}

/// The drive's own unit: NAWUPF + 1 blocks within its boundaries, a multiple of the sector
/// (`None` where NATOMIC is clear, or the unit is below a sector).
fn drive_unit(d: &Declared, sector: u64) -> Option<u64> {
    let mut unit = d.ns.power_fail_unit_bytes()?;
    if let Some((size, offset)) = d.ns.power_fail_boundary_bytes() {
        unit = gcd(unit, size);
        if offset > 0 {
            unit = gcd(unit, offset);
        }
    }
    (unit >= sector && unit.is_multiple_of(sector)).then_some(unit)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The namespace's fields as a note gives them.
fn fields(d: &Declared) -> String {
    let ns = &d.ns;
    let awupf = d.awupf.map_or("unread".to_string(), |a| a.to_string());
    format!(
        "Identify: NSFEAT.NATOMIC {}, NAWUPF {}, NABSPF {}, NABO {}, {}-byte blocks; AWUPF {awupf}, not used",
        u8::from(ns.natomic()),
        ns.nawupf,
        ns.nabspf,
        ns.nabo,
        ns.block_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(nsfeat: u8, nawupf: u16, nabspf: u16, nabo: u16) -> Declared {
        Declared {
            ns: NamespaceIdentity {
                block_bytes: 512,
                metadata_bytes: 0,
                nsfeat,
                flbas: 0,
                dps: 0,
                dlfeat: 0,
                nawun: 0,
                nawupf,
                nabsn: 0,
                nabo,
                nabspf,
            },
            awupf: Some(0),
        }
    }

    #[test]
    fn the_scenario_then_the_namespaces_nawupf_then_one_block() {
        let natomic = ns(0x02, 7, 0, 0);
        let (u, note) = atomic_unit(None, 512, Some(&natomic)).unwrap();
        assert_eq!(u, 4096);
        let note = note.unwrap();
        assert!(note.starts_with("atomic unit 4096 bytes: the drive's own (Identify: NSFEAT.NATOMIC 1, NAWUPF 7"), "{note}");
        // The scenario wins, and the drive's fields are still recorded.
        let (u, note) = atomic_unit(Some(16384), 512, Some(&natomic)).unwrap();
        assert_eq!(u, 16384);
        assert!(note.unwrap().contains("the scenario's target.atomic_bytes (the drive declares Identify: NSFEAT.NATOMIC 1, NAWUPF 7"));
        assert!(atomic_unit(Some(256), 512, Some(&natomic)).is_err());
        // NATOMIC clear (QEMU 7.2's namespaces): one block, whatever NAWUPF holds.
        let (u, note) = atomic_unit(None, 512, Some(&ns(0x00, 7, 0, 0))).unwrap();
        assert_eq!(u, 512);
        assert!(note.unwrap().starts_with("atomic unit 512 bytes, one logical block: the namespace declares no NAWUPF"));
        // Not NVMe: one sector, nothing to say.
        assert_eq!(atomic_unit(None, 4096, None).unwrap(), (4096, None));
    }

    #[test]
    fn boundaries_cut_the_unit_so_that_no_aligned_unit_crosses_one() {
        // 8 blocks atomic, boundaries every 16 blocks from block 0: 8 blocks fit.
        assert_eq!(drive_unit(&ns(0x02, 7, 15, 0), 512), Some(4096));
        // Boundaries every 12 blocks: units of 4 blocks never cross one.
        assert_eq!(drive_unit(&ns(0x02, 7, 11, 0), 512), Some(2048));
        // Boundaries every 16 blocks from block 2: units of 2 blocks.
        assert_eq!(drive_unit(&ns(0x02, 7, 15, 2), 512), Some(1024));
        // Blocks of 512 bytes held to 4096-byte sectors: a unit below the sector is none.
        assert_eq!(drive_unit(&ns(0x02, 3, 0, 0), 4096), None);
    }
}
