//! The lab drive's namespaces with protection information (`lab --pi-namespace-mib`).

/// One of the lab's namespaces with protection information (`lab --pi-namespace-mib`): its
/// id, its formatted block and metadata bytes, its PI type and where the tuple is, and the
/// guest variable that names its block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PiNamespace {
    pub nsid: u32,
    pub block_bytes: u64,
    pub metadata_bytes: u64,
    /// T10 PI type 1, 2 or 3.
    pub pi_type: u8,
    /// The tuple in the metadata's first bytes (QEMU `pil=1`), else its last.
    pub first: bool,
    /// A 64-bit guard (QEMU `pif=2`: a 16-byte tuple), else 16-bit.
    pub guard64: bool,
    pub env: &'static str,
}

/// The lab's PI namespaces, each with its metadata in a separate buffer (`mset=0`), as QEMU's
/// `nvme-ns` takes them (hw/nvme/ns.c: `ms`, `mset`, `pi`, `pil`): type 1 at 512+8, which the
/// guest kernel's block integrity generates and checks (T10-DIF-TYPE1-CRC), at 4096+8, and at
/// 4096+64 with the tuple in the last 8 bytes, which the kernel registers as metadata without
/// PI (it takes PI only first or alone), so only faultline's passthrough engine writes and
/// checks its tuples; type 2 at 4096+8; type 3 at 4096+16 with the tuple first.
pub const PI_NAMESPACES: [PiNamespace; 7] = [
    PiNamespace { nsid: 2, block_bytes: 512, metadata_bytes: 8, pi_type: 1, first: false, guard64: false, env: "LAB_NS_PI" },
    PiNamespace { nsid: 3, block_bytes: 4096, metadata_bytes: 8, pi_type: 1, first: false, guard64: false, env: "LAB_NS_PI_4K" },
    PiNamespace { nsid: 4, block_bytes: 4096, metadata_bytes: 64, pi_type: 1, first: false, guard64: false, env: "LAB_NS_PI_4K64" },
    PiNamespace { nsid: 5, block_bytes: 4096, metadata_bytes: 8, pi_type: 2, first: false, guard64: false, env: "LAB_NS_PI_T2" },
    PiNamespace { nsid: 6, block_bytes: 4096, metadata_bytes: 16, pi_type: 3, first: true, guard64: false, env: "LAB_NS_PI_T3" },
    PiNamespace { nsid: 7, block_bytes: 4096, metadata_bytes: 16, pi_type: 1, first: false, guard64: true, env: "LAB_NS_PI_G64" },
    PiNamespace { nsid: 8, block_bytes: 4096, metadata_bytes: 32, pi_type: 1, first: false, guard64: true, env: "LAB_NS_PI_G64L" },
];

impl PiNamespace {
    /// Its `nvme-ns` settings, on drive `drive`.
    pub fn qemu_arg(&self, drive: &str) -> String {
        let b = self.block_bytes;
        format!(
            "nvme-ns,drive={drive},nsid={},shared=on,logical_block_size={b},physical_block_size={b},ms={},mset=0,pi={},pil={},pif={}",
            self.nsid,
            self.metadata_bytes,
            self.pi_type,
            u8::from(self.first),
            if self.guard64 { 2 } else { 0 }
        )
    }

    /// The size of its image for `data_bytes` of data: QEMU keeps the metadata after the data
    /// in the same image, and gives the namespace `size / (block + metadata)` blocks.
    pub fn image_bytes(&self, data_bytes: u64) -> u64 {
        data_bytes / self.block_bytes * (self.block_bytes + self.metadata_bytes)
    }
}
