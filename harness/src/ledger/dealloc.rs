//! What a run holds a deallocated sector to (`RunHeader::dealloc_reads`).

use serde::{Deserialize, Serialize};

/// What a deallocated sector must read, as the run holds the drive to it: the drive's own
/// declaration (NVMe DLFEAT bits 2:0), else what its engine guarantees (a punched hole reads
/// zeros), else nothing (docs/DOMAIN.md, "Deallocate and Write Zeroes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeallocRead {
    Zeros,
    Ones,
    /// Zeros, all FFh, or the data last written there; never anything older.
    #[default]
    Unreported,
}

impl DeallocRead {
    pub(super) fn is_unreported(&self) -> bool {
        *self == DeallocRead::Unreported
    }
}

impl From<DeallocRead> for faultline_drivers::DeallocReads {
    fn from(r: DeallocRead) -> Self {
        match r {
            DeallocRead::Zeros => faultline_drivers::DeallocReads::Zeros,
            DeallocRead::Ones => faultline_drivers::DeallocReads::Ones,
            DeallocRead::Unreported => faultline_drivers::DeallocReads::Unreported,
        }
    }
}

impl From<faultline_drivers::DeallocReads> for DeallocRead {
    fn from(r: faultline_drivers::DeallocReads) -> Self {
        match r {
            faultline_drivers::DeallocReads::Zeros => DeallocRead::Zeros,
            faultline_drivers::DeallocReads::Ones => DeallocRead::Ones,
            faultline_drivers::DeallocReads::Unreported => DeallocRead::Unreported,
        }
    }
}
