//! The shipped scenario files and the committed JSON Schema.
//!
//! Every file in `scenarios/` must parse, validate and round-trip; the templates must say what
//! their names promise; `scenarios/reference.toml` must show the real defaults; and
//! `scenarios/scenario.schema.json` must be what the scenario types generate today. After a
//! change to the types, regenerate it with
//! `FAULTLINE_BLESS=1 cargo test -p faultline --test integration scenarios::schema_is_current`.

use faultline::ledger::Contract;
use faultline::scenario::{
    scenario_schema, scenario_schema_text, CutPlacement, Cycles, Fault, LinkReset, OnEvent, Scenario, SimModel, SimSwitch, StopPolicy,
    VerifyPolicy, Workload, REFERENCE_SCENARIO,
};
use faultline::workload::Pattern;
use faultline_drivers::control::ControllerSpec;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

fn load(name: &str) -> Scenario {
    Scenario::load(&dir().join(name)).unwrap_or_else(|e| panic!("{e}"))
}

const SHIPPED: [&str; 45] = [
    "reference.toml",
    "demo.toml",
    "dualport-demo.toml",
    "plp-validation.toml",
    "volatile-flush.toml",
    "clean-shutdown-control.toml",
    "plp-1.toml",
    "trim-power-cut.toml",
    "format-power-cut.toml",
    "lab-format-power-cut.toml",
    "misaligned-torture.toml",
    "link-reset-storm.toml",
    "hotplug-pin-sweep.toml",
    "lab-nvme-reset.toml",
    "lab-pci-flr.toml",
    "lab-power-cut.toml",
    "lab-power-shapes.toml",
    "lab-power-cut-flush.toml",
    "lab-plp-1.toml",
    "lab-trim-power-cut.toml",
    "lab-power-cut-fua.toml",
    "lab-power-cut-numato.toml",
    "lab-power-cut-lcus.toml",
    "lab-power-cut-quarch-usb.toml",
    "lab-power-cut-hidrelay.toml",
    "lab-pci-remove-rescan.toml",
    "lab-pi-passthrough.toml",
    "dualport-link-redundancy.toml",
    "dualport-quarch-pull.toml",
    "dualport-reset-storm.toml",
    "dualport-flr.toml",
    "dualport-nssr.toml",
    "dualport-performance.toml",
    "dualport-plp.toml",
    "dualport-soak.toml",
    "lab-dualport-pull.toml",
    "lab-dualport-quarch-pull.toml",
    "lab-dualport-power-cut.toml",
    "lab-multipath-pull.toml",
    "remote-host-plp.toml",
    "two-host-demo.toml",
    "two-host-ipmi.toml",
    "two-host-shutdown.toml",
    "lab-two-hosts.toml",
    "lab-two-hosts-reset.toml",
];

#[test]
fn every_shipped_scenario_parses_validates_and_round_trips() {
    let mut found: Vec<String> =
        std::fs::read_dir(dir()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n.ends_with(".toml")).collect();
    found.sort();
    let mut want: Vec<String> = SHIPPED.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want, "scenarios/ and the list of shipped scenarios in this test disagree");
    for name in SHIPPED {
        let path = dir().join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("#:schema ./scenario.schema.json\n"), "{name}: first line should point editors at the schema");
        let s = load(name);
        assert_eq!(s.name, name.trim_end_matches(".toml"), "{name}: name and file name differ");
        let again = Scenario::from_toml(&s.to_toml().unwrap(), name).unwrap_or_else(|e| panic!("{name} after to_toml: {e}"));
        assert_eq!(again, s, "{name}: round trip");
        // Validated into a run plan, as `faultline run` does before it opens anything.
        let plan = s.plan(name, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
        let dual = name.starts_with("dualport-")
            || name.starts_with("lab-dualport-")
            || name.starts_with("two-host-")
            || name.starts_with("lab-two-hosts");
        assert_eq!(plan.dual.is_some(), dual, "{name}: a dual-port template runs dual-port, the others one port");
        if s.target.sim.is_none() && name != "reference.toml" {
            assert!(s.expectation().serial.is_some(), "{name}: a hardware template must pin the drive's identity");
        }
    }
}

#[test]
fn demo_runs_without_hardware_and_loses_acknowledged_writes() {
    let s = load("demo.toml");
    let sim = s.target.sim.as_ref().expect("the demo uses the simulated drive");
    assert_eq!(s.power_controller().unwrap(), Some(ControllerSpec::Sim));
    assert_eq!(sim.switch, SimSwitch::QuarchSerial, "the demo goes through the Quarch emulator on a pty");
    // A rollback of the newest mapping update under the PLP contract: a cut loses an
    // acknowledged write.
    assert_eq!((sim.model, s.contract), (SimModel::Rollback { writes_per_cut: 1 }, Contract::Plp));
    assert!((100..=1000).contains(&s.cycles.count), "a few hundred cycles");
    assert_eq!(s.stop.on_finding, OnEvent::Continue);
    assert!(s.seed.is_some(), "the demo replays identically");
    s.layout(sim.sector_bytes as u64, sim.capacity_bytes, s.seed.unwrap()).unwrap();
}

#[test]
fn hardware_templates_say_what_their_names_promise() {
    let plp = load("plp-validation.toml");
    assert_eq!((plp.contract, plp.cycles.count, plp.workload.pattern), (Contract::Plp, 3000, Pattern::Random {}));
    assert_eq!((plp.workload.min_write_bytes, plp.workload.max_write_bytes), (4096, 4096));
    assert!(plp.workload.queue_depth >= 64);
    assert!(matches!(plp.fault, Fault::PowerCut { .. }) && matches!(plp.cut, CutPlacement::UniformTime { .. }));

    let vol = load("volatile-flush.toml");
    assert_eq!(vol.contract, Contract::Flush);
    assert!(vol.workload.flush.every_writes.is_some() && vol.workload.flush.fua_percent > 0);

    let control = load("clean-shutdown-control.toml");
    assert_eq!(control.fault, Fault::CleanShutdown);
    assert!(matches!(control.cut, CutPlacement::WhileIdle { .. }));

    let mis = load("misaligned-torture.toml");
    assert_eq!((mis.workload.align_bytes, mis.workload.min_write_bytes), (512, 512));
    assert!(!mis.workload.mean_write_bytes.is_multiple_of(4096));

    let storm = load("link-reset-storm.toml");
    assert_eq!(storm.fault, Fault::LinkReset { reset: LinkReset::NvmeController, port: None });
    assert!(storm.link_controller().unwrap().is_some_and(|l| l.is_link()) && storm.controllers.power.is_none());

    let sweep = load("hotplug-pin-sweep.toml");
    assert_eq!(sweep.fault, Fault::PowerCut { mate_steps_ms: vec![10, 25, 100, 500], recovery: None });
    assert!(matches!(sweep.power_controller().unwrap(), Some(ControllerSpec::Quarch { .. })));
    assert!(
        sweep.cycles.off_time_ms.shortest() >= std::time::Duration::from_secs(15),
        "surprise-removal guidance: 15 s between hot-plug operations"
    );
}

#[test]
fn dual_port_templates_say_what_their_names_promise() {
    use faultline::scenario::{DualMode, PortRole};
    let dual = |name: &str| {
        let s = load(name);
        let plan = s.plan(name, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(plan.dual.is_some(), "{name}: not a dual-port plan");
        (s, plan)
    };
    let link = |s: &Scenario| s.link_controller().unwrap().unwrap_or_else(|| panic!("{}: no link controller", s.name));
    let per_path = |name: &str, d: &faultline::scenario::RunPlan| {
        let paths: Vec<_> = d.ports.iter().map(|p| p.path.clone().unwrap().display().to_string()).collect();
        assert_eq!(paths, ["/dev/nvme0n1", "/dev/nvme1n1"], "{name}: one per-path node per port (nvme_core.multipath=N)");
    };

    // The multipath head: the one writer and the port judged; B the path pulled, idle.
    let (s, d) = dual("dualport-link-redundancy.toml");
    assert!(matches!(link(&s), ControllerSpec::Quarch { .. }), "{}", link(&s));
    assert_eq!(d.ports.iter().map(|p| p.role).collect::<Vec<_>>(), [PortRole::Writer, PortRole::Idle]);
    assert_eq!(d.ports[0].path, d.ports[1].path, "both name the head: the pulled path has no node");
    assert_eq!((d.fault_ports.clone(), d.ports[1].fault_name()), (vec![1], "B"));
    assert_eq!(s.fault, Fault::LinkReset { reset: LinkReset::PortPull, port: None });

    let (s, d) = dual("dualport-quarch-pull.toml");
    assert_eq!(link(&s).to_string(), "quarch+serial:///dev/ttyUSB0");
    per_path(&s.name, &d);
    assert_eq!(d.ports.iter().map(|p| p.fault_name()).collect::<Vec<_>>(), ["A", "B"]);
    assert_eq!(d.fault_ports, [0, 1], "alternates");
    assert_eq!(s.fault, Fault::LinkReset { reset: LinkReset::PortPull, port: None });

    for (name, spec, reset) in [
        ("dualport-reset-storm.toml", "nvme-reset://nvme0", LinkReset::NvmeController),
        ("dualport-flr.toml", "pci-reset://0000:3b:00.0?method=flr", LinkReset::PciFunctionFlr),
        ("dualport-nssr.toml", "nvme-subsys-reset://nvme0", LinkReset::NvmeSubsystem),
    ] {
        let (s, d) = dual(name);
        assert_eq!(link(&s).to_string(), spec, "{name}");
        assert_eq!(s.fault, Fault::LinkReset { reset, port: None }, "{name}");
        per_path(name, &d);
        assert_eq!(d.fault_ports, [0], "{name}: one port's controller or function, always A");
        // Port A's fault_port names what the controller spec resets.
        assert!(spec.contains(d.ports[0].fault_name()), "{name}: {spec} and {}", d.ports[0].fault_name());
        assert!(s.cycles.count >= 200, "{name}: a storm");
    }

    // A power cut of the whole simulated dual-port drive, both ports writing.
    let (s, d) = dual("dualport-plp.toml");
    assert_eq!(s.fault, Fault::PowerCut { mate_steps_ms: Vec::new(), recovery: None });
    assert_eq!(s.contract, Contract::Plp);
    assert!(d.ports.iter().all(|p| p.role == PortRole::Writer), "both ports write when the power goes");

    let (s, d) = dual("dualport-performance.toml");
    per_path(&s.name, &d);
    let spec = &d.dual.as_ref().unwrap().spec;
    assert_eq!(spec.mode, DualMode::Performance);
    assert!(spec.perf_ms >= 1000);
    assert!(d.ports.iter().all(|p| p.role == PortRole::Writer), "A only, B only, A+B: both write");
}

#[test]
fn a_dual_port_run_with_one_port_is_refused() {
    // A dual-port run judges the ports the fault did not hit: with one entry there is none.
    let text = std::fs::read_to_string(dir().join("dualport-link-redundancy.toml")).unwrap();
    let one =
        text.split("[[ports]]\nname = \"B\"").next().unwrap().to_string() + "[controllers]" + text.split("[controllers]").nth(1).unwrap();
    let one = one.replace("fault_ports = [\"B\"]", "fault_ports = [\"A\"]");
    let e = Scenario::from_toml(&one, "one.toml").and_then(|s| s.plan("one.toml", 1).map(|_| ())).expect_err("one port, [dual]");
    assert!(e.to_string().contains("a dual-port run needs two ports"), "{e}");
}

#[test]
fn reference_scenario_shows_the_real_defaults() {
    let r = Scenario::from_toml(REFERENCE_SCENARIO, "reference.toml").unwrap();
    assert_eq!(r, load("reference.toml"));
    assert_eq!(r.description, "");
    assert_eq!(r.workload, Workload::default());
    assert_eq!(r.verify, VerifyPolicy::default());
    assert_eq!(r.stop, StopPolicy::default());
    let Cycles { off_time_ms, readiness_timeout_s, .. } = r.cycles;
    let minimal = Scenario::from_toml(
        "format_version = 1\nname = \"m\"\ncontract = \"plp\"\n[target]\npath = \"/dev/x\"\n[controllers]\npower = \"manual\"\n\
         [fault]\nkind = \"power_cut\"\n[cut]\nkind = \"after_completions\"\ncompletions = 1\n[cycles]\ncount = 1\n",
        "minimal",
    )
    .unwrap();
    assert_eq!((off_time_ms, readiness_timeout_s), (minimal.cycles.off_time_ms, minimal.cycles.readiness_timeout_s));
}

#[test]
fn schema_is_current() {
    let path = dir().join("scenario.schema.json");
    let want = scenario_schema_text();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have == want {
        return;
    }
    if std::env::var_os("FAULTLINE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        eprintln!("rewrote {}", path.display());
        return;
    }
    panic!(
        "{} is out of date with the scenario types in harness/src/scenario/.\n\
         Regenerate it with: FAULTLINE_BLESS=1 cargo test -p faultline --test integration scenarios::schema_is_current",
        path.display()
    );
}

#[test]
fn schema_refuses_unknown_keys_and_documents_defaults() {
    let schema = scenario_schema();
    assert_eq!(schema["additionalProperties"], false);
    let defs = schema["$defs"].as_object().unwrap();
    for (name, def) in defs {
        if def.get("properties").is_some() {
            assert_eq!(def["additionalProperties"], false, "{name} accepts unknown keys");
        }
    }
    assert!(!scenario_schema_text().contains("null"), "TOML has no null: optional keys are left out");
    let sim = &defs["Target"]["properties"]["sim"];
    assert_eq!(sim["$ref"], "#/$defs/SimTarget", "{sim}");
    let off = &defs["Cycles"]["properties"]["off_time_ms"];
    assert_eq!(off["default"], 3000);
    assert!(off["description"].as_str().unwrap().contains("Default: 3000"), "{off}");
}
