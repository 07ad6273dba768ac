//! `workload.ops`: the shares of ids that write, deallocate and write zeroes
//! (`{ write = 0.9, deallocate = 0.05, write_zeroes = 0.05 }`), validated into the workload's
//! [`OpMix`] in parts per million.

use crate::workload::OpMix;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A share between 0 and 1, resolved to a millionth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Share(pub f64);

/// Shares compare as numbers; validation refuses NaN, so equality is an equivalence on every
/// share a plan holds.
impl Eq for Share {}

/// The operations a workload issues. Default: writes only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ops {
    /// The share of writes. Default: what the others leave (they must then add up to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Share>,
    /// The share of deallocates (trim, discard, NVMe Dataset Management). Default: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deallocate: Share,
    /// The share of Write Zeroes. Default: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub write_zeroes: Share,
}

fn is_zero(s: &Share) -> bool {
    s.0 == 0.0
}

impl Ops {
    /// The mix in parts per million, or the field that is wrong and why.
    pub fn mix(&self) -> Result<OpMix, (&'static str, String)> {
        let ppm = |field: &'static str, s: Share| -> Result<u32, (&'static str, String)> {
            if !s.0.is_finite() || !(0.0..=1.0).contains(&s.0) {
                return Err((field, format!("{}: expected a share from 0 to 1", s.0)));
            }
            Ok((s.0 * OpMix::WHOLE as f64).round() as u32)
        };
        let deallocate_ppm = ppm("workload.ops.deallocate", self.deallocate)?;
        let write_zeroes_ppm = ppm("workload.ops.write_zeroes", self.write_zeroes)?;
        let rest = OpMix::WHOLE as i64 - deallocate_ppm as i64 - write_zeroes_ppm as i64;
        if rest < 0 {
            return Err((
                "workload.ops",
                format!("deallocate {} and write_zeroes {} add up to more than 1", self.deallocate.0, self.write_zeroes.0),
            ));
        }
        if let Some(w) = self.write {
            let write = ppm("workload.ops.write", w)? as i64;
            if write != rest {
                return Err((
                    "workload.ops",
                    format!(
                        "write {}, deallocate {} and write_zeroes {} add up to {}, not 1",
                        w.0,
                        self.deallocate.0,
                        self.write_zeroes.0,
                        (write + OpMix::WHOLE as i64 - rest) as f64 / OpMix::WHOLE as f64
                    ),
                ));
            }
        }
        Ok(OpMix { deallocate_ppm, write_zeroes_ppm })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(write: Option<f64>, deallocate: f64, write_zeroes: f64) -> Ops {
        Ops { write: write.map(Share), deallocate: Share(deallocate), write_zeroes: Share(write_zeroes) }
    }

    #[test]
    fn shares_become_parts_per_million_and_must_add_up_to_one() {
        assert_eq!(ops(None, 0.0, 0.0).mix(), Ok(OpMix::default()));
        assert_eq!(ops(Some(0.9), 0.05, 0.05).mix(), Ok(OpMix { deallocate_ppm: 50_000, write_zeroes_ppm: 50_000 }));
        assert_eq!(ops(None, 0.1, 0.0).mix(), Ok(OpMix { deallocate_ppm: 100_000, write_zeroes_ppm: 0 }));
        assert_eq!(ops(Some(0.5), 0.1, 0.0).mix().unwrap_err().0, "workload.ops");
        assert_eq!(ops(None, 0.7, 0.7).mix().unwrap_err().0, "workload.ops");
        assert_eq!(ops(None, -0.1, 0.0).mix().unwrap_err().0, "workload.ops.deallocate");
        assert_eq!(ops(None, 0.0, f64::NAN).mix().unwrap_err().0, "workload.ops.write_zeroes");
        assert_eq!(ops(Some(2.0), 0.0, 0.0).mix().unwrap_err().0, "workload.ops.write");
    }
}
