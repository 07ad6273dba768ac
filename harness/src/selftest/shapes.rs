//! The matrix's shape rows: the fault models found by how the power goes (cuts while the
//! drive recovers; a glitch, a sag, a ramp down), and the honest models, which must stay clean
//! under every shape. They run on the mixed workload; a supply shape through the emulated
//! Quarch module that makes it (a hot-plug module's glitch engine, a power module's rail).

use super::{models, MatrixOptions};
use crate::ledger::Contract;
use crate::scenario::{Fault, RecoveryAt, RecoveryCuts, Scenario, SimModel, SimSwitch};

/// What a shape row's name says of a plain power cut.
pub const SINGLE_CUT: &str = "single cut";

/// Which shapes a model of the shape rows is run under.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Finds {
    /// An honest model: every shape.
    Nothing,
    /// Found by cuts while the drive recovers: those, and a single cut.
    Recovery,
    /// Found by the supply's shapes: those, and a single cut.
    Supply,
}

/// A model of the shape rows: the contracts it runs under and whether it is honest there, and
/// which shapes find it.
type ShapeModel = (SimModel, Vec<(Contract, bool)>, Finds);

/// The models of the shape rows.
fn shape_models() -> Vec<ShapeModel> {
    use Contract::*;
    vec![
        (SimModel::HonestPlp, vec![(Plp, true), (Flush, true)], Finds::Nothing),
        (SimModel::HonestVolatile, vec![(Flush, true)], Finds::Nothing),
        (SimModel::ReplayCorrupts { replay_ms: 2000, sectors_per_cut: 2 }, vec![(Plp, false), (Flush, false)], Finds::Recovery),
        (SimModel::PlpRecharge { recharge_ms: 50 }, vec![(Plp, false), (Flush, false)], Finds::Recovery),
        (SimModel::PfailMissesSag { detect_mv: 9_000 }, vec![(Plp, false), (Flush, false)], Finds::Supply),
    ]
}

/// One cut before the drive is ready, two after it answers; each within 5 ms.
fn recovery_shapes() -> Vec<Fault> {
    [
        RecoveryCuts { cuts: 1, at: RecoveryAt::BeforeReady, within_ms: 5 },
        RecoveryCuts { cuts: 2, at: RecoveryAt::AfterReady, within_ms: 5 },
    ]
    .into_iter()
    .map(|r| Fault::PowerCut { mate_steps_ms: Vec::new(), recovery: Some(r) })
    .collect()
}

/// A glitch every drive rides through (100 µs, under the simulated drive's 200 µs hold-up)
/// and one none does (1 ms); a sag into the band between the brown-out (10 000 mV) and a late
/// detector (9 000 mV), 5 ms long; a ramp to nothing over 50 ms, whose first 10 ms step
/// lands in that band.
fn supply_shapes() -> Vec<Fault> {
    let glitch = |length_us| Fault::PowerGlitch { length_us, signals: vec!["12V_POWER".into(), "12V_CHARGE".into()] };
    vec![
        glitch(100),
        glitch(1_000),
        Fault::PowerSag { rail: "12V".into(), to_mv: 9_500, length_ms: 5 },
        Fault::PowerRamp { rail: "12V".into(), to_mv: 0, over_ms: 50 },
    ]
}

fn single_cut() -> Fault {
    Fault::PowerCut { mate_steps_ms: Vec::new(), recovery: None }
}

/// The shape as the table names it.
pub fn shape_name(f: &Fault) -> String {
    match f {
        Fault::PowerCut { recovery: Some(r), .. } => r.label(),
        Fault::PowerGlitch { length_us, .. } => format!("glitch {length_us} us"),
        Fault::PowerSag { to_mv, length_ms, .. } => format!("sag to {to_mv} mV, {length_ms} ms"),
        Fault::PowerRamp { to_mv, over_ms, .. } => format!("ramp to {to_mv} mV over {over_ms} ms"),
        _ => SINGLE_CUT.into(),
    }
}

/// The (model, contract, honest, shape) of every shape row, in row order: each shape the
/// model is not already run under in [`models`]' rows.
pub fn shape_rows() -> Vec<(SimModel, Contract, bool, Fault)> {
    let plain: Vec<SimModel> = models().into_iter().map(|(m, _)| m).collect();
    let mut out = Vec::new();
    for (model, contracts, finds) in shape_models() {
        let shapes: Vec<Fault> = match finds {
            Finds::Nothing => recovery_shapes().into_iter().chain(supply_shapes()).collect(),
            Finds::Recovery => std::iter::once(single_cut()).chain(recovery_shapes()).collect(),
            Finds::Supply => std::iter::once(single_cut()).chain(supply_shapes()).collect(),
        };
        for (contract, honest) in contracts {
            for shape in shapes.iter().filter(|s| **s != single_cut() || !plain.contains(&model)) {
                out.push((model, contract, honest, shape.clone()));
            }
        }
    }
    out
}

/// Cycles of a shape row: fewer than the plain rows' (a shape costs little, and the plain
/// rows already give the honest models their 10,000 cycles).
pub fn shape_cycles(opts: &MatrixOptions, honest: bool) -> u32 {
    if honest {
        opts.honest_cycles.div_ceil(8)
    } else {
        opts.faulty_cycles
    }
}

/// The row scenario under `shape`, through the emulated module that makes it.
pub fn shaped(mut s: Scenario, shape: &Fault) -> Scenario {
    if let Some(sim) = s.target.sim.as_mut() {
        sim.switch = match shape {
            Fault::PowerGlitch { .. } => SimSwitch::QuarchHotplugSerial,
            Fault::PowerSag { .. } | Fault::PowerRamp { .. } => SimSwitch::QuarchSerial,
            _ => sim.switch,
        };
    }
    s.fault = shape.clone();
    s
}
