//! Format NVM (admin opcode 80h) of one namespace, keeping its current format.
//!
//! Command Dword 10 (NVMe Base 2.1, "Format NVM"; libnvme's `nvme_format_nvm` packs it the
//! same way): bits 3:0 LBAF (the format index's low bits), 4 MSET (metadata interleaved
//! with the data), 7:5 PI (the protection information type), 8 PIL (its tuple first), 11:9
//! SES (000b: no secure erase), 13:12 LBAFU (the index's high bits). Identify Namespace gives
//! each: FLBAS bits 3:0 and 6:5 the index, bit 4 MSET; DPS bits 2:0 the PI type, bit 3 PIL.

use super::{NamespaceIdentity, NvmeAdmin, NvmeAdminCmd, NvmeError};

/// Format NVM's opcode.
pub const OPC_FORMAT_NVM: u8 = 0x80;

/// How long the kernel gives the command (nvme-cli's default for `nvme format`: 600 s).
pub const FORMAT_TIMEOUT_MS: u32 = 600_000;

/// Format NVM of namespace `nsid` into the format it has now (`ns`), without secure erase.
pub fn format_nvm_cmd(nsid: u32, ns: &NamespaceIdentity) -> NvmeAdminCmd {
    let index = ns.format_index() as u32;
    let mset = u32::from((ns.flbas >> 4) & 1);
    let (pi, pil) = (u32::from(ns.dps & 0x07), u32::from((ns.dps >> 3) & 1));
    let cdw10 = (index & 0x0F) | mset << 4 | pi << 5 | pil << 8 | ((index >> 4) & 0x03) << 12;
    NvmeAdminCmd { opcode: OPC_FORMAT_NVM, nsid, cdw10, timeout_ms: FORMAT_TIMEOUT_MS, ..Default::default() }
}

impl NvmeAdmin {
    /// Formats namespace `nsid` again in the format it has, without secure erase: every block
    /// of it loses its data. Returns once the drive completed the command (the kernel freezes
    /// the controller's I/O meanwhile, and revalidates its namespaces after).
    pub fn format_namespace(&self, nsid: u32) -> Result<(), NvmeError> {
        let ns = self.identify_namespace(nsid)?;
        self.admin(&format!("Format NVM of namespace {nsid}"), format_nvm_cmd(nsid, &ns), &mut [])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(flbas: u8, dps: u8) -> NamespaceIdentity {
        let mut b = Box::new([0u8; super::super::IDENTIFY_BYTES]);
        b[25] = 31; // 32 formats
        b[26] = flbas;
        b[29] = dps;
        for f in 0..32 {
            b[128 + 4 * f + 2] = 9; // 512-byte blocks
        }
        NamespaceIdentity::parse(&b).unwrap()
    }

    #[test]
    fn format_nvm_keeps_the_namespace_s_format_index_metadata_and_protection() {
        let c = format_nvm_cmd(3, &ns(0x01, 0));
        assert_eq!((c.opcode, c.nsid, c.cdw10, c.timeout_ms), (0x80, 3, 0x001, 600_000));
        // Format 2, metadata interleaved (MSET), PI type 1 with the tuple first (PIL).
        assert_eq!(format_nvm_cmd(1, &ns(0x12, 0x09)).cdw10, 0x2 | 1 << 4 | 1 << 5 | 1 << 8);
        // Format 0x13 (FLBAS bits 6:5 hold 01b): LBAF 3, LBAFU 1; PI type 3.
        assert_eq!(format_nvm_cmd(1, &ns(0x23, 0x03)).cdw10, 0x3 | 3 << 5 | 1 << 12);
        assert_eq!(c.cdw10 >> 9 & 0x7, 0, "no secure erase");
    }
}
