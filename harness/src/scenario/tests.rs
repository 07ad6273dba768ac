use super::parse::line_column;
use super::*;
use proptest::prelude::*;

const MINIMAL: &str = r#"
format_version = 1
name = "minimal"
contract = "plp"

[target]
path = "/dev/nvme0n1"

[controllers]
power = "quarch+serial:///dev/ttyUSB0"

[fault]
kind = "power_cut"

[cut]
kind = "uniform_time"
window_start_ms = 100
window_end_ms = 2000

[cycles]
count = 10
"#;

fn minimal() -> Scenario {
    Scenario::from_toml(MINIMAL, "minimal.toml").unwrap()
}

fn invalid_field(text: &str) -> (String, String) {
    match Scenario::from_toml(text, "t.toml").unwrap_err() {
        ScenarioError::Invalid { origin, field, message } => {
            assert_eq!(origin, "t.toml");
            (field, message)
        }
        other => panic!("expected a validation error, got {other}"),
    }
}

#[test]
fn scenario_minimal_file_gets_the_documented_defaults() {
    let s = minimal();
    assert_eq!(s.workload, Workload::default());
    assert_eq!(s.verify, VerifyPolicy::default());
    assert_eq!(s.stop, StopPolicy::default());
    assert_eq!(s.cycles, Cycles { count: 10, off_time_ms: OffTime::Fixed(3000), readiness_timeout_s: 120 });
    assert_eq!(s.workload.pattern, Pattern::Random {});
    assert_eq!(s.seed, None);
}

#[test]
fn scenario_line_column_counts_characters_from_one() {
    let t = "ab\ncdé\nf";
    assert_eq!(line_column(t, 0), (1, 1));
    assert_eq!(line_column(t, 3), (2, 1));
    assert_eq!(line_column(t, 7), (2, 4));
    assert_eq!(line_column(t, 8), (3, 1));
    assert_eq!(line_column(t, 6), (2, 3), "inside a multi-byte character: its start");
    assert_eq!(line_column(t, 100), (3, 2));
}

#[test]
fn scenario_unknown_key_names_line_and_column() {
    let text = MINIMAL.replace("count = 10", "count = 10\noff_time = 5");
    let e = Scenario::from_toml(&text, "t.toml").unwrap_err();
    let line = text.lines().position(|l| l.starts_with("off_time")).unwrap() + 1;
    match &e {
        ScenarioError::Syntax { origin, line: l, column, message } => {
            assert_eq!((origin.as_str(), *l, *column), ("t.toml", line, 1), "{e}");
            assert!(message.contains("off_time") && message.contains("off_time_ms"), "{e}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().starts_with(&format!("t.toml:{line}:1: ")), "{e}");
}

#[test]
fn scenario_wrong_type_and_bad_syntax_name_line_and_column() {
    let text = MINIMAL.replace("count = 10", "count = \"ten\"");
    let line = text.lines().position(|l| l.starts_with("count")).unwrap() + 1;
    let ScenarioError::Syntax { line: l, column, .. } = Scenario::from_toml(&text, "t").unwrap_err() else { panic!() };
    assert_eq!((l, column), (line, 9));
    let text = MINIMAL.replace("[cycles]", "[cycles");
    let line = text.lines().position(|l| l.starts_with("[cycles")).unwrap() + 1;
    let ScenarioError::Syntax { line: l, .. } = Scenario::from_toml(&text, "t").unwrap_err() else { panic!() };
    assert_eq!(l, line);
}

#[test]
fn scenario_missing_or_other_format_version_is_refused_first() {
    let text = MINIMAL.replace("format_version = 1", "format_version = 2\nnew_key_of_v2 = true");
    let e = Scenario::from_toml(&text, "t.toml").unwrap_err();
    assert!(matches!(e, ScenarioError::Version { found: 2, line: 2, column: 18, .. }), "{e}");
    assert!(e.to_string().contains("reads format_version 1"), "{e}");
    let e = Scenario::from_toml(&MINIMAL.replace("format_version = 1", ""), "t.toml").unwrap_err();
    assert!(e.to_string().contains("missing `format_version = 1`"), "{e}");
    let e = Scenario::from_toml(&MINIMAL.replace("format_version = 1", "format_version = \"1\""), "t.toml").unwrap_err();
    assert!(e.to_string().contains("must be an integer"), "{e}");
}

#[test]
fn scenario_bad_controller_spec_names_the_field_and_the_forms() {
    let (field, msg) = invalid_field(&MINIMAL.replace("quarch+serial:///dev/ttyUSB0", "quarch+serial://ttyUSB0"));
    assert_eq!(field, "controllers.power");
    assert!(msg.contains("absolute path") && msg.contains("accepted forms:") && msg.contains("nvme-reset://nvme0"), "{msg}");
    let e = Scenario::from_toml(&MINIMAL.replace("quarch+serial:///dev/ttyUSB0", "relay"), "t.toml").unwrap_err();
    assert!(e.to_string().starts_with("t.toml: controllers.power: bad controller spec \"relay\""), "{e}");
}

#[test]
fn scenario_semantic_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("[target]\npath = \"/dev/nvme0n1\"", "[target]", "target"),
        ("path = \"/dev/nvme0n1\"", "path = \"nvme0n1\"", "target.path"),
        ("[cycles]\ncount = 10", "[cycles]\ncount = 0", "cycles.count"),
        ("count = 10", "count = 10\noff_time_ms = 0", "cycles.off_time_ms"),
        ("count = 10", "count = 10\noff_time_ms = [1, 10, 0]", "cycles.off_time_ms[2]"),
        ("count = 10", "count = 10\noff_time_ms = []", "cycles.off_time_ms"),
        ("count = 10", "count = 10\noff_time_ms = { min = 5, max = 3600001 }", "cycles.off_time_ms.max"),
        ("count = 10", "count = 10\noff_time_ms = { min = 50, max = 5 }", "cycles.off_time_ms"),
        ("window_end_ms = 2000", "window_end_ms = 50", "cut.window_end_ms"),
        ("[cycles]", "[workload]\nmin_write_bytes = 1000\n[cycles]", "workload.min_write_bytes"),
        ("[cycles]", "[workload]\nalign_bytes = 3000\n[cycles]", "workload.align_bytes"),
        ("[cycles]", "[workload]\nmax_write_bytes = 65536\nmean_write_bytes = 131072\n[cycles]", "workload.mean_write_bytes"),
        ("[cycles]", "[workload]\nqueue_depth = 0\n[cycles]", "workload.queue_depth"),
        ("[cycles]", "[workload]\nflush = { fua_percent = 101 }\n[cycles]", "workload.flush.fua_percent"),
        (
            "[cycles]",
            "[workload]\npattern = { kind = \"hot_cold\", hot_span_percent = 0, hot_write_percent = 90 }\n[cycles]",
            "workload.pattern.hot_span_percent",
        ),
        ("[cycles]", "[workload]\nspan_start_bytes = 8192\nspan_end_bytes = 8192\n[cycles]", "workload.span_end_bytes"),
        ("[cycles]", "[workload]\nmax_write_bytes = 8192\nmean_write_bytes = 8192\nspan_end_bytes = 4096\n[cycles]", "workload"),
        (
            "kind = \"uniform_time\"\nwindow_start_ms = 100\nwindow_end_ms = 2000",
            "kind = \"while_idle\"\nafter_completions = 0",
            "cut.after_completions",
        ),
        ("kind = \"power_cut\"", "kind = \"link_reset\"\nreset = \"nvme_controller\"", "controllers.link"),
        ("power = \"quarch+serial:///dev/ttyUSB0\"", "power = \"nvme-reset://nvme0\"", "controllers.power"),
        ("power = \"quarch+serial:///dev/ttyUSB0\"", "power = \"sim\"", "controllers.power"),
        ("kind = \"power_cut\"", "kind = \"power_cut\"\nmate_steps_ms = [0]", "fault.mate_steps_ms"),
        ("kind = \"power_cut\"", "kind = \"power_cut\"\nrecovery = { cuts = 0 }", "fault.recovery.cuts"),
        ("kind = \"power_cut\"", "kind = \"power_glitch\"\nlength_us = 0", "fault.length_us"),
        ("kind = \"power_cut\"", "kind = \"power_glitch\"\nlength_us = 5\nsignals = []", "fault.signals"),
        ("kind = \"power_cut\"", "kind = \"power_glitch\"\nlength_us = 5\nsignals = [\"12V POWER\"]", "fault.signals[0]"),
        ("kind = \"power_cut\"", "kind = \"power_cut\"\nrecovery = { within_ms = 600001 }", "fault.recovery.within_ms"),
        ("kind = \"power_cut\"", "kind = \"power_sag\"\nto_mv = 14401\nlength_ms = 5", "fault.to_mv"),
        ("kind = \"power_cut\"", "kind = \"power_sag\"\nrail = \"5V\"\nto_mv = 6001\nlength_ms = 5", "fault.to_mv"),
        ("kind = \"power_cut\"", "kind = \"power_sag\"\nrail = \"24V\"\nto_mv = 9000\nlength_ms = 5", "fault.rail"),
        ("kind = \"power_cut\"", "kind = \"power_sag\"\nto_mv = 9000\nlength_ms = 0", "fault.length_ms"),
        ("kind = \"power_cut\"", "kind = \"power_ramp\"\nover_ms = 600001", "fault.over_ms"),
        ("[cycles]", "[stop]\nmax_consecutive_harness_errors = 0\n[cycles]", "stop.max_consecutive_harness_errors"),
        ("[cycles]", "[verify]\nsample_bytes = 1000\n[cycles]", "verify.sample_bytes"),
        ("name = \"minimal\"", "name = \" \"", "name"),
        ("path = \"/dev/nvme0n1\"", "serial = \"\"", "target.serial"),
    ];
    for (from, to, want) in cases {
        assert!(MINIMAL.contains(from), "{from}");
        let (field, msg) = invalid_field(&MINIMAL.replacen(from, to, 1));
        assert_eq!(&field, want, "{to}: {msg}");
    }
    let manual =
        MINIMAL.replace("quarch+serial:///dev/ttyUSB0", "manual").replace("kind = \"power_cut\"", "kind = \"power_cut\"\nrecovery = {}");
    let (field, msg) = invalid_field(&manual);
    assert_eq!((field.as_str(), msg.contains("a manual switch (a person) cannot")), ("fault.recovery", true), "{msg}");
    let relay = MINIMAL
        .replace("quarch+serial:///dev/ttyUSB0", "lcus+serial:///dev/ttyUSB0?channel=1")
        .replace("kind = \"power_cut\"", "kind = \"power_glitch\"\nlength_us = 5");
    let (field, msg) = invalid_field(&relay);
    assert_eq!((field.as_str(), msg.contains("can cut the power, not glitch it")), ("controllers.power", true), "{msg}");
    let (field, msg) = invalid_field(&relay.replace("kind = \"power_glitch\"\nlength_us = 5", "kind = \"power_ramp\"\nover_ms = 50"));
    assert_eq!((field.as_str(), msg.contains("can cut the power, not set its voltage")), ("controllers.power", true), "{msg}");
}

#[test]
fn scenario_sim_target_rules() {
    let sim = MINIMAL
        .replace("path = \"/dev/nvme0n1\"", "sim = { capacity_bytes = 67108864, model = { kind = \"honest_plp\" } }")
        .replace("quarch+serial:///dev/ttyUSB0", "sim");
    let s = Scenario::from_toml(&sim, "t").unwrap();
    let t = s.target.sim.as_ref().unwrap();
    assert_eq!((t.sector_bytes, t.atomic_bytes, t.queue_depth, t.switch), (512, 4096, 64, SimSwitch::Direct));
    assert!(s.expectation().is_empty());
    let (field, _) = invalid_field(&sim.replace("\"sim\"", "\"quarch+serial:///dev/ttyUSB0\""));
    assert_eq!(field, "controllers.power");
    let (field, _) = invalid_field(&sim.replace("[controllers]", "[controllers]\nlink = \"nvme-reset://nvme0\""));
    assert_eq!(field, "controllers.link");
    let (field, _) = invalid_field(&sim.replace("[target]", "[target]\nserial = \"X\""));
    assert_eq!(field, "target.sim");
    for mv in [0, 10_000] {
        let late = sim.replace("kind = \"honest_plp\"", &format!("kind = \"pfail_misses_sag\", detect_mv = {mv}"));
        assert_ne!(late, sim);
        let (field, msg) = invalid_field(&late);
        assert_eq!(field, "target.sim.model.detect_mv", "{msg}");
    }
    let (field, _) = invalid_field(&sim.replace("capacity_bytes = 67108864", "capacity_bytes = 67108864, sector_bytes = 1024"));
    assert_eq!(field, "target.sim.sector_bytes");
    let (field, _) = invalid_field(&sim.replace("capacity_bytes = 67108864", "capacity_bytes = 67108864, queue_depth = 8"));
    assert_eq!(field, "target.sim.queue_depth");
    let (field, _) = invalid_field(&sim.replace("[cycles]", "[workload]\nspan_end_bytes = 134217728\n[cycles]"));
    assert_eq!(field, "workload.span_end_bytes");
    let (field, _) = invalid_field(
        &sim.replace("capacity_bytes = 67108864", "capacity_bytes = 67108864, sector_bytes = 4096, atomic_bytes = 4096")
            .replace("[cycles]", "[workload]\nalign_bytes = 512\nmin_write_bytes = 512\nmean_write_bytes = 512\n[cycles]"),
    );
    assert_eq!(field, "workload.align_bytes");
}

#[test]
fn scenario_models_and_resets_map_onto_the_fixtures_and_drivers() {
    assert_eq!(SimModel::DiesAfterCuts { cuts: 3 }.fault_model(), faultline_fixtures::FaultModel::DiesAfterCuts(3));
    assert_eq!(SimModel::Rollback { writes_per_cut: 2 }.fault_model(), faultline_fixtures::FaultModel::Rollback { writes_per_cut: 2 });
    use faultline_drivers::{PciResetMethod, ResetKind};
    assert_eq!(LinkReset::PciFunctionBus.reset_kind(), ResetKind::PciFunction(Some(PciResetMethod::Bus)));
    assert_eq!(LinkReset::Perst.reset_kind().to_string(), "perst");
}

#[test]
fn scenario_layout_checks_the_real_geometry() {
    let s = minimal();
    let l = s.layout(512, 1 << 30, 7).unwrap();
    assert_eq!((l.spec().span_end, l.spec().seed), (1 << 30, 7));
    let e = s.layout(8192, 1 << 30, 7).unwrap_err();
    assert!(e.to_string().contains("align_bytes 4096"), "{e}");
    let mut s2 = s.clone();
    s2.workload.span_end_bytes = Some(2 << 30);
    assert!(s2.layout(512, 1 << 30, 7).unwrap_err().to_string().contains("past the end"));
}

#[test]
fn scenario_hand_written_schemas_match_the_serde_forms() {
    let schema = scenario_schema();
    let contract = &schema["properties"]["contract"];
    for v in contract["enum"].as_array().unwrap() {
        let name = v.as_str().unwrap();
        assert!(name.parse::<Contract>().is_ok(), "{name}");
        let toml_text = format!("c = \"{name}\"");
        #[derive(Deserialize)]
        struct C {
            #[expect(dead_code, reason = "only deserialised")]
            c: Contract,
        }
        toml::from_str::<C>(&toml_text).unwrap();
    }
    let patterns = schema["$defs"]["Workload"]["properties"]["pattern"]["oneOf"].as_array().unwrap();
    let forms =
        ["{ kind = \"sequential\" }", "{ kind = \"random\" }", "{ kind = \"hot_cold\", hot_span_percent = 10, hot_write_percent = 90 }"];
    assert_eq!(patterns.len(), forms.len());
    for (p, form) in patterns.iter().zip(forms) {
        #[derive(Deserialize)]
        struct P {
            p: Pattern,
        }
        let parsed = toml::from_str::<P>(&format!("p = {form}")).unwrap().p;
        let kind = serde_json::to_value(parsed).unwrap()["kind"].clone();
        assert_eq!(p["properties"]["kind"]["const"], kind);
    }
}

fn placements() -> impl Strategy<Value = CutPlacement> {
    prop_oneof![
        (0u64..10_000, 1u64..10_000).prop_map(|(a, d)| CutPlacement::UniformTime { window_start_ms: a, window_end_ms: a + d }),
        (1u64..1 << 40).prop_map(|completions| CutPlacement::AfterCompletions { completions }),
        (0u64..1 << 40).prop_map(|after_completions| CutPlacement::WhileFlushOutstanding { after_completions }),
        (1u64..1 << 40).prop_map(|after_completions| CutPlacement::WhileIdle { after_completions }),
    ]
}

fn faults() -> impl Strategy<Value = (Fault, Option<String>)> {
    prop_oneof![
        proptest::collection::vec(1u32..=1000, 0..4).prop_map(|mate_steps_ms| (Fault::PowerCut { mate_steps_ms, recovery: None }, None)),
        (0usize..10, proptest::option::of("[a-zA-Z0-9:. é\"\\\\]{1,12}")).prop_map(|(i, port)| {
            let resets = [
                LinkReset::NvmeController,
                LinkReset::NvmeSubsystem,
                LinkReset::PciFunction,
                LinkReset::PciFunctionFlr,
                LinkReset::PciFunctionBus,
                LinkReset::PciFunctionPm,
                LinkReset::PciRemoveRescan,
                LinkReset::SlotPower,
                LinkReset::PortPull,
                LinkReset::Perst,
            ];
            let port = port.filter(|p| !p.trim().is_empty());
            (Fault::LinkReset { reset: resets[i], port }, Some("quarch+tcp://host:9760?module=2".to_string()))
        }),
        Just((Fault::CleanShutdown, None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn scenario_round_trips_through_toml(
        seed in proptest::option::of(any::<u64>()),
        description in "[ -~é\n\"']{0,40}",
        plp in any::<bool>(),
        (fault, link) in faults(),
        cut in placements(),
        count in 1u32..100_000,
        off_time_ms in prop_oneof![
            (1u64..3_600_000).prop_map(OffTime::Fixed),
            proptest::collection::vec(1u64..3_600_000, 1..8).prop_map(OffTime::Sweep),
            (1u64..1_000, 0u64..1_000).prop_map(|(min, more)| OffTime::Range { min, max: min + more }),
        ],
        fua_percent in 0u8..=100,
        every_writes in proptest::option::of(1u64..1 << 50),
        full_at_end in any::<bool>(),
        on_finding in prop_oneof![Just(OnEvent::Continue), Just(OnEvent::Stop)],
        serial in proptest::option::of("[A-Z0-9 _-]{1,20}"),
    ) {
        let mut s = minimal();
        s.seed = seed;
        s.description = description;
        s.contract = if plp { Contract::Plp } else { Contract::Flush };
        s.fault = fault;
        s.controllers.link = link;
        s.cut = cut;
        s.cycles.count = count;
        s.cycles.off_time_ms = off_time_ms;
        s.workload.flush = Flush { every_writes: every_writes.or(Some(64)), every_ms: None, fua_percent };
        s.verify.full_at_end = full_at_end;
        s.stop.on_finding = on_finding;
        s.target.serial = serial.filter(|v| !v.trim().is_empty());
        s.validate("generated").unwrap();
        let text = s.to_toml().unwrap();
        let back = Scenario::from_toml(&text, "generated").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, s, "{}", text);
    }
}

#[test]
fn scenario_models_and_switches_display_as_the_file_spells_them() {
    for (model, text) in [
        (SimModel::HonestPlp, "honest_plp"),
        (SimModel::Rollback { writes_per_cut: 1 }, "rollback (writes_per_cut = 1)"),
        (SimModel::DiesAfterCuts { cuts: 50 }, "dies_after_cuts (cuts = 50)"),
    ] {
        assert_eq!(model.to_string(), text);
        let kind = text.split(' ').next().unwrap();
        let v = serde_json::to_value(model).unwrap();
        assert_eq!(v["kind"], kind, "Display and the file agree on the name");
    }
    for sw in [
        SimSwitch::Direct,
        SimSwitch::QuarchSerial,
        SimSwitch::QuarchHotplugSerial,
        SimSwitch::QuarchTcp,
        SimSwitch::LcusSerial,
        SimSwitch::NumatoSerial,
    ] {
        assert_eq!(serde_json::to_value(sw).unwrap(), sw.to_string());
    }
}

#[test]
fn scenario_plan_refuses_a_clean_shutdown_in_a_time_window_and_fills_in_the_seed() {
    let mut s = minimal();
    let plan = s.plan("minimal.toml", 77).unwrap();
    assert_eq!((plan.seed, plan.scenario.seed), (77, Some(77)), "a scenario without a seed takes the one given");
    assert_eq!(plan.ports.len(), 1);
    assert!(matches!(plan.fault(1), FaultPlan::PowerCut { switch: Switch::Controller(_), .. }));
    s.seed = Some(5);
    assert_eq!(s.plan("minimal.toml", 77).unwrap().seed, 5, "the scenario's own seed wins");
    s.fault = Fault::CleanShutdown;
    let e = s.plan("minimal.toml", 1).unwrap_err().to_string();
    assert!(e.contains("cut.kind") && e.contains("while_idle"), "{e}");
    s.cut = CutPlacement::WhileIdle { after_completions: 3 };
    assert!(s.plan("minimal.toml", 1).unwrap().fault(1).is_clean_shutdown());
}

#[test]
fn a_path_of_a_namespace_is_picked_by_its_controller_with_the_identity() {
    let by = |fields: &str| MINIMAL.replace("path = \"/dev/nvme0n1\"", fields);
    let s = Scenario::from_toml(&by("serial = \"D1\"\ncntlid = 2"), "t.toml").unwrap();
    assert_eq!(s.path_selector().map(|p| p.cntlid), Some(Some(2)));
    let s = Scenario::from_toml(&by("serial = \"D1\"\npci_address = \"0000:3b:00.0\""), "t.toml").unwrap();
    assert_eq!(s.path_selector().and_then(|p| p.pci_address).as_deref(), Some("0000:3b:00.0"));
    assert_eq!(minimal().path_selector(), None);
    let (field, message) = invalid_field(&by("path = \"/dev/nvme1n1\"\nserial = \"D1\"\ncntlid = 2"));
    assert!(field == "target" && message.contains("names the path already"), "{field}: {message}");
    let (field, message) = invalid_field(&by("controller = \"nvme1\""));
    assert!(field == "target" && message.contains("give the namespace's identity too"), "{field}: {message}");
    let (field, _) = invalid_field(&by("serial = \"D1\"\npci_address = \" \""));
    assert_eq!(field, "target.pci_address");
}

#[test]
fn scenario_health_checks_can_be_switched_off_by_name_once_each() {
    assert!(minimal().health.off.is_empty(), "every check is made by default");
    let s = Scenario::from_toml(&format!("{MINIMAL}\n[health]\noff = [\"unsafe_shutdowns\", \"plp_started\"]\n"), "t.toml").unwrap();
    assert_eq!(s.health.off, vec![crate::health::HealthCheck::UnsafeShutdowns, crate::health::HealthCheck::PlpStarted]);
    // It survives the round trip through the run directory's copy of the scenario.
    assert_eq!(Scenario::from_toml(&s.to_toml().unwrap(), "again.toml").unwrap().health, s.health);
    let (field, message) = invalid_field(&format!("{MINIMAL}\n[health]\noff = [\"media_errors\", \"media_errors\"]\n"));
    assert_eq!((field.as_str(), message.as_str()), ("health.off", "media_errors is given twice"));
    let e = Scenario::from_toml(&format!("{MINIMAL}\n[health]\noff = [\"temperature\"]\n"), "t.toml").unwrap_err().to_string();
    assert!(e.contains("temperature") && e.contains("unsafe_shutdowns"), "an unknown check names the known ones: {e}");
}

fn with(sets: &[&str]) -> Result<Scenario, ScenarioError> {
    let sets: Vec<Override> = sets.iter().map(|s| s.parse().unwrap()).collect();
    Scenario::from_toml_with(MINIMAL, "minimal.toml", &sets)
}

fn override_error(sets: &[&str]) -> String {
    with(sets).map(|_| ()).expect_err("the override should be refused").to_string()
}

#[test]
fn override_sets_values_as_the_file_would() {
    let s = with(&["cycles.count=5", "target.path=/dev/nvme2n1", "seed=0x10", "workload.queue_depth = 8"]).unwrap();
    assert_eq!(s.cycles.count, 5);
    assert_eq!(s.target.path.as_deref(), Some(std::path::Path::new("/dev/nvme2n1")));
    assert_eq!(s.seed, Some(16));
    assert_eq!(s.workload.queue_depth, 8);
    // Everything else is the file's.
    let m = minimal();
    assert_eq!((s.name, s.fault, s.cut, s.controllers), (m.name, m.fault, m.cut, m.controllers));
    // A table the file lacks is made; a quoted string stays a string.
    let s = with(&["stop.on_finding=\"stop\"", "description=\"two words\""]).unwrap();
    assert_eq!((s.stop.on_finding, s.description.as_str()), (OnEvent::Stop, "two words"));
    // The result writes out and reads back as itself (what a resume reads).
    assert_eq!(Scenario::from_toml(&s.to_toml().unwrap(), "again").unwrap(), s);
}

#[test]
fn override_of_a_tagged_table_is_an_inline_table() {
    let s = with(&["cut={kind = \"after_completions\", completions = 7}"]).unwrap();
    assert_eq!(s.cut, CutPlacement::AfterCompletions { completions: 7 });
    // A dotted key keeps the table's other keys, which the new kind does not take.
    let e = override_error(&["cut.kind=after_completions", "cut.completions=7"]);
    assert!(e.starts_with("minimal.toml: --set cut.kind=after_completions: unknown field `window_"), "{e}");
}

#[test]
fn override_errors_name_the_override_and_what_was_wrong() {
    let e = override_error(&["cycles.count=5", "cycles.count=abc"]);
    assert_eq!(e, "minimal.toml: --set cycles.count=abc: invalid type: string \"abc\", expected u32");
    let e = override_error(&["cycles.cont=3"]);
    assert!(e.starts_with("minimal.toml: --set cycles.cont=3: unknown field `cont`, expected one of `count`"), "{e}");
    let e = override_error(&["cycles.count.x=3"]);
    assert_eq!(e, "minimal.toml: --set cycles.count.x=3: `cycles.count` is an integer, not a table");
    // A value that reads but does not validate names the field, and the overrides in the origin.
    let e = override_error(&["workload.min_write_bytes=1000"]);
    assert!(e.starts_with("minimal.toml with --set workload.min_write_bytes=1000: workload.min_write_bytes: "), "{e}");
}

#[test]
fn override_indexes_arrays_of_tables() {
    let text = include_str!("../../../scenarios/dualport-flr.toml");
    let set = |s: &str| -> Result<Scenario, ScenarioError> { Scenario::from_toml_with(text, "p.toml", &[s.parse().unwrap()]) };
    let s = set("ports.1.path=/dev/nvme3n1").unwrap();
    assert_eq!(s.ports[1].path.as_deref(), Some(std::path::Path::new("/dev/nvme3n1")));
    let e = set("ports.2.path=/dev/x").map(|_| ()).unwrap_err().to_string();
    assert_eq!(e, "p.toml: --set ports.2.path=/dev/x: `ports.2`: the scenario's `ports` has 2 entries, numbered from 0");
}

#[test]
fn override_text_is_refused_with_the_form_it_takes() {
    assert_eq!(
        "cycles.count".parse::<Override>().unwrap_err().to_string(),
        "`cycles.count`: an override is PATH=VALUE (e.g. cycles.count=5)"
    );
    assert!("cycles..count=1".parse::<Override>().unwrap_err().to_string().contains("`` is not a key"));
    assert!("cy cles=1".parse::<Override>().unwrap_err().to_string().contains("`cy cles` is not a key"));
    assert_eq!("a.b = [1, 2]".parse::<Override>().unwrap().path(), "a.b");
}

#[test]
fn override_leaves_the_file_own_errors_located() {
    let broken = MINIMAL.replace("count = 10", "count = \"ten\"");
    let e = Scenario::from_toml_with(&broken, "b.toml", &["seed=1".parse().unwrap()]).map(|_| ()).unwrap_err();
    let line = 1 + broken.lines().position(|l| l.contains("\"ten\"")).unwrap();
    assert!(matches!(e, ScenarioError::Syntax { line: l, .. } if l == line), "{e}");
    // ...unless an override mends it.
    let s = Scenario::from_toml_with(&broken, "b.toml", &["cycles.count=3".parse().unwrap()]).unwrap();
    assert_eq!(s.cycles.count, 3);
    // A file of another version is refused for its version, whatever the overrides.
    let other = MINIMAL.replace("format_version = 1", "format_version = 2");
    let e = Scenario::from_toml_with(&other, "v.toml", &["format_version=1".parse().unwrap()]).map(|_| ()).unwrap_err();
    assert!(matches!(e, ScenarioError::Version { found: 2, .. }), "{e}");
}

proptest! {
    #[test]
    fn override_never_panics_on_any_text(text in ".{0,40}") {
        if let Ok(o) = text.parse::<Override>() {
            let _ = Scenario::from_toml_with(MINIMAL, "minimal.toml", &[o]);
        }
    }
}

/// `MINIMAL` with a mixed fault (power cuts and clean shutdowns through its power switch).
fn mixed(pick: &str, faults: &str) -> String {
    MINIMAL
        .replace("[fault]\nkind = \"power_cut\"", &format!("[fault]\nkind = \"mixed\"\npick = \"{pick}\"\nfaults = [{faults}]"))
        .replace("kind = \"uniform_time\"\nwindow_start_ms = 100\nwindow_end_ms = 2000", "kind = \"while_idle\"\nafter_completions = 5")
}

#[test]
fn a_mixed_fault_draws_each_cycle_s_fault_from_the_seed_and_the_cycle() {
    let two = "{ weight = 2, fault = { kind = \"power_cut\" } }, { fault = { kind = \"clean_shutdown\" } }";
    let s = Scenario::from_toml(&mixed("sequence", two), "t.toml").unwrap();
    let plan = s.plan("t.toml", 1).unwrap();
    assert!(plan.faults.is_mixed());
    // In turn, each for its weight in cycles: power, power, clean, power, power, clean.
    let kinds: Vec<String> = (1..=6).map(|c| plan.fault(c).label()).collect();
    assert_eq!(kinds, ["power-cut", "power-cut", "clean-shutdown", "power-cut", "power-cut", "clean-shutdown"]);
    let s = Scenario::from_toml(&mixed("weighted", two), "t.toml").unwrap();
    let (a, b) = (s.plan("t.toml", 7).unwrap(), s.plan("t.toml", 7).unwrap());
    let draws: Vec<usize> = (1..=3000).map(|c| a.faults.index(a.seed, c)).collect();
    assert_eq!(draws, (1..=3000).map(|c| b.faults.index(b.seed, c)).collect::<Vec<_>>(), "the same seed draws the same faults");
    let power = draws.iter().filter(|&&i| i == 0).count();
    assert!((1800..2200).contains(&power), "seed 7: weight 2 of 3 is drawn about 2000 times in 3000, not {power}");
    let other = s.plan("t.toml", 8).unwrap();
    assert_ne!(draws, (1..=3000).map(|c| other.faults.index(other.seed, c)).collect::<Vec<_>>(), "another seed, other draws");
    // A run of one fault is not a mix: every cycle the same, and no label in its events.
    assert!(!minimal().plan("m.toml", 1).unwrap().faults.is_mixed());
}

#[test]
fn a_mixed_fault_is_refused_where_one_of_its_faults_would_be() {
    let err = |pick: &str, faults: &str| invalid_field(&mixed(pick, faults));
    assert_eq!(err("sequence", "").0, "fault.faults");
    let (field, message) = err("weighted", "{ weight = 0, fault = { kind = \"power_cut\" } }");
    assert_eq!(field, "fault.faults[0].weight", "{message}");
    let (field, message) =
        err("sequence", "{ fault = { kind = \"power_cut\" } }, { fault = { kind = \"link_reset\", reset = \"nvme_controller\" } }");
    assert_eq!((field.as_str(), message.contains("link controller")), ("controllers.link", true), "{message}");
    let (field, message) = err("sequence", "{ fault = { kind = \"mixed\", pick = \"sequence\", faults = [] } }");
    assert_eq!(field, "fault.faults[0].fault", "{message}");
    let (field, message) = err("sequence", "{ fault = { kind = \"power_cut\", mate_steps_ms = [0] } }");
    assert_eq!(field, "fault.faults[0].fault.mate_steps_ms", "{message}");
    // A clean shutdown among them needs a placement it can keep, as on its own.
    let timed = mixed("sequence", "{ fault = { kind = \"clean_shutdown\" } }")
        .replace("kind = \"while_idle\"\nafter_completions = 5", "kind = \"uniform_time\"\nwindow_start_ms = 100\nwindow_end_ms = 2000");
    let e = Scenario::from_toml(&timed, "t.toml").unwrap().plan("t.toml", 1).unwrap_err().to_string();
    assert!(e.contains("cut.kind"), "{e}");
}

#[test]
fn a_target_on_another_host_is_named_by_its_path_there_and_refuses_what_is_not_carried_yet() {
    let on_host = |extra: &str| MINIMAL.replace("path = \"/dev/nvme0n1\"", &format!("path = \"/dev/nvme0n1\"\nhost = \"dut-1\"\n{extra}"));
    let s = Scenario::from_toml(&on_host("serial = \"S1\""), "t.toml").unwrap();
    match s.plan("t.toml", 1).unwrap().target {
        TargetPlan::Remote { host, transport, target, expect } => {
            assert_eq!((host.as_str(), target.as_str(), expect.serial.as_deref()), ("dut-1", "/dev/nvme0n1", Some("S1")));
            assert_eq!(transport, crate::transport::SSH.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "ssh by default");
        }
        other => panic!("{other:?}"),
    }
    let s = Scenario::from_toml(
        &on_host("transport = [\"ssh\", \"-p\", \"2222\", \"{host}\", \"faultline\", \"agent\", \"--stdio\"]"),
        "t.toml",
    )
    .unwrap();
    assert!(matches!(s.plan("t.toml", 1).unwrap().target, TargetPlan::Remote { transport, .. } if transport[2] == "2222"));
    let cases: &[(String, &str, &str)] = &[
        (
            MINIMAL.replace("path = \"/dev/nvme0n1\"", "path = \"/dev/nvme0n1\"\ntransport = [\"ssh\"]"),
            "target.transport",
            "give target.host too",
        ),
        (MINIMAL.replace("path = \"/dev/nvme0n1\"", "host = \"dut-1\""), "target.path", "as its agent's --target lists it"),
        (on_host("host = \"\""), "", ""),
        (on_host("transport = []"), "target.transport", "the transport command is empty"),
        (on_host("cntlid = 1\nserial = \"S\""), "target.host", "give no cntlid"),
        (
            on_host("").replace("[cycles]", "[workload]\nprefill = true\n[cycles]"),
            "workload.prefill",
            "not carried by the agent protocol yet",
        ),
    ];
    for (text, field, says) in cases {
        if field.is_empty() {
            // A key given twice is TOML's own error.
            assert!(Scenario::from_toml(text, "t.toml").is_err());
            continue;
        }
        let (f, m) = invalid_field(text);
        assert_eq!(&f, field, "{m}");
        assert!(m.contains(says), "{m}");
    }
    let (f, m) = invalid_field(&MINIMAL.replace("path = \"/dev/nvme0n1\"", "host = \"  \"\npath = \"/dev/nvme0n1\""));
    assert_eq!((f.as_str(), m.contains("must not be empty")), ("target.host", true), "{m}");
}
