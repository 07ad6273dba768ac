//! What the scenario file alone can tell: every field in range, the parts consistent.

use super::*;

impl Scenario {
    /// `controllers.power`, parsed (errors name the scenario by its `name`).
    pub fn power_controller(&self) -> Result<Option<ControllerSpec>, ScenarioError> {
        parse_controller(&self.name, "controllers.power", self.controllers.power.as_deref())
    }

    /// `controllers.link`, parsed (errors name the scenario by its `name`).
    pub fn link_controller(&self) -> Result<Option<ControllerSpec>, ScenarioError> {
        parse_controller(&self.name, "controllers.link", self.controllers.link.as_deref())
    }

    /// Checks what the file alone can tell; the runner checks the workload again against the
    /// target's geometry with [`Scenario::layout`].
    pub fn validate(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        if self.format_version != FORMAT_VERSION {
            return bad("format_version", format!("{} is not supported: this faultline reads {FORMAT_VERSION}", self.format_version));
        }
        if self.name.trim().is_empty() {
            return bad("name", "must not be empty".into());
        }
        self.validate_target(origin)?;
        let capacity = self.target.sim.as_ref().map(|s| s.capacity_bytes).or(self.target.size_bytes);
        let sector = self.target.sim.as_ref().map_or(PARSE_SECTOR_BYTES, |s| s.sector_bytes as u64);
        self.validate_workload(origin, sector, capacity)?;
        if let Some(sim) = &self.target.sim {
            if sim.queue_depth < self.workload.queue_depth {
                return bad(
                    "target.sim.queue_depth",
                    format!(
                        "{} is below workload.queue_depth {}: the drive would refuse writes",
                        sim.queue_depth, self.workload.queue_depth
                    ),
                );
            }
        }
        self.validate_controllers(origin)?;
        self.validate_ports(origin)?;
        self.validate_cut(origin)?;
        self.validate_cycles(origin)?;
        let mut off = self.health.off.clone();
        off.sort();
        if let Some(w) = off.windows(2).find(|w| w[0] == w[1]) {
            return bad("health.off", format!("{} is given twice", w[0].name()));
        }
        Ok(())
    }

    /// The controllers parse, fit the target, and can do the fault.
    fn validate_controllers(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        let power = parse_controller(origin, "controllers.power", self.controllers.power.as_deref())?;
        let link = parse_controller(origin, "controllers.link", self.controllers.link.as_deref())?;
        if let Some(p) = &power {
            if !p.is_power() {
                return bad("controllers.power", format!("{p} is a link controller, not a power switch (put it under controllers.link)"));
            }
            if (*p == ControllerSpec::Sim) != self.target.sim.is_some() {
                return bad("controllers.power", "the `sim` switch and a `target.sim` drive go together: use both or neither".into());
            }
        }
        let dual_sim = self.target.sim.as_ref().is_some_and(|s| s.dual.is_some());
        if link == Some(ControllerSpec::Sim) && !dual_sim {
            return bad("controllers.link", "`sim` resets a link of the simulated dual-port drive only (target.sim.dual)".into());
        }
        if let Some(l) = link.as_ref().filter(|l| **l != ControllerSpec::Sim) {
            if self.target.sim.is_some() {
                return bad("controllers.link", format!("{l}: the simulated drive has no link to reset"));
            }
            if !l.is_link() {
                return bad("controllers.link", format!("{l} cannot reset a link"));
            }
        }
        if let Fault::Mixed { faults, .. } = &self.fault {
            if faults.is_empty() {
                return bad("fault.faults", "a mixed fault lists at least one fault".into());
            }
            if faults.len() > 64 {
                return bad("fault.faults", format!("{} faults: at most 64", faults.len()));
            }
            for (i, m) in faults.iter().enumerate() {
                let field = format!("fault.faults[{i}]");
                if m.weight == 0 || m.weight > 1_000_000 {
                    return bad(&format!("{field}.weight"), format!("{}: expected 1 to 1000000", m.weight));
                }
                self.validate_fault(origin, &m.fault, &format!("{field}.fault"), power.as_ref(), link.as_ref())?;
            }
            return Ok(());
        }
        self.validate_fault(origin, &self.fault, "fault", power.as_ref(), link.as_ref())
    }

    /// One fault (`field`: where it is, `fault` or a mix's entry) fits the controllers.
    fn validate_fault(
        &self,
        origin: &str,
        fault: &Fault,
        field: &str,
        power: Option<&ControllerSpec>,
        link: Option<&ControllerSpec>,
    ) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        match fault {
            Fault::PowerCut { mate_steps_ms, recovery } => {
                if let Err((at, message)) = self.check_power_cut(field, power, mate_steps_ms, recovery.as_ref()) {
                    return bad(&at, message);
                }
            }
            Fault::PowerGlitch { length_us, signals } => {
                if let Err((at, message)) = self.check_glitch(field, power, *length_us, signals) {
                    return bad(&at, message);
                }
            }
            Fault::PowerSag { rail, to_mv, length_ms } => {
                if let Err((at, message)) = self.check_rail_shape(field, power, "power_sag", rail, *to_mv, ("length_ms", *length_ms)) {
                    return bad(&at, message);
                }
            }
            Fault::PowerRamp { rail, to_mv, over_ms } => {
                if let Err((at, message)) = self.check_rail_shape(field, power, "power_ramp", rail, *to_mv, ("over_ms", *over_ms)) {
                    return bad(&at, message);
                }
            }
            Fault::LinkReset { port, .. } => {
                if link.is_none() {
                    return bad("controllers.link", "a link_reset fault needs a link controller".into());
                }
                if port.as_deref().is_some_and(|p| p.trim().is_empty()) {
                    return bad(&format!("{field}.port"), "must not be empty (leave it out for the controller's only port)".into());
                }
            }
            Fault::Mixed { .. } => {
                return bad(field, "a mixed fault's faults are single faults: a mix inside a mix is not supported".into());
            }
            // Its hosts' power switches are the ports' (`check_hosts`, once the ports are planned).
            Fault::HostPowerCut { all_hosts, stagger_ms } => {
                if *stagger_ms > 0 && !*all_hosts {
                    return bad(&format!("{field}.stagger_ms"), "staggers the cuts of every host: give all_hosts = true too".into());
                }
                if *stagger_ms > 600_000 {
                    return bad(&format!("{field}.stagger_ms"), format!("{stagger_ms}: at most 600000 (ten minutes)"));
                }
            }
            // Its hosts are the ports' (`check_hosts`, once the ports are planned).
            Fault::HostLinkReset { .. } | Fault::HostShutdown { .. } => {}
            Fault::CleanShutdown | Fault::NormalShutdown => {
                if power.is_none() {
                    return bad(
                        "controllers.power",
                        format!("a {} fault cuts power through the controller: it needs a power switch", fault.kind_name()),
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether the power switch is a Quarch hot-plug module (for the simulated drive, its
    /// emulator): pin-mate sequencing and the glitch engine are its.
    fn quarch_hotplug(&self, power: Option<&ControllerSpec>) -> bool {
        match &self.target.sim {
            Some(sim) => sim.switch == SimSwitch::QuarchHotplugSerial,
            None => matches!(power, Some(ControllerSpec::Quarch { .. })),
        }
    }

    /// A `power_cut` (at `field`) fits the power switch: `Err((where, what))`.
    fn check_power_cut(
        &self,
        field: &str,
        power: Option<&ControllerSpec>,
        mate_steps_ms: &[u32],
        recovery: Option<&super::RecoveryCuts>,
    ) -> Result<(), (String, String)> {
        if power.is_none() {
            return Err(("controllers.power".into(), "a power_cut fault needs a power switch".into()));
        }
        if let Some(Err((at, what))) = recovery.map(|r| r.check()) {
            return Err((format!("{field}.recovery.{at}"), what));
        }
        if recovery.is_some() && matches!(power, Some(ControllerSpec::Manual)) {
            return Err((
                format!("{field}.recovery"),
                "cuts while the drive recovers come milliseconds apart: a manual switch (a person) cannot make them".into(),
            ));
        }
        if let Some(&step) = mate_steps_ms.iter().find(|&&s| s == 0 || s > 1000) {
            return Err((
                format!("{field}.mate_steps_ms"),
                format!("step {step} ms: expected 1 to 1000 (fast 10, standard 25, slow 100, very slow 500)"),
            ));
        }
        if !mate_steps_ms.is_empty() && !self.quarch_hotplug(power) {
            return Err((
                format!("{field}.mate_steps_ms"),
                "pin-mate sequencing needs a Quarch hot-plug module as the power switch (for the simulated drive: \
                 switch = \"quarch_hotplug_serial\")"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A `power_glitch` (at `field`) fits the power switch: `Err((where, what))`.
    fn check_glitch(
        &self,
        field: &str,
        power: Option<&ControllerSpec>,
        length_us: u64,
        signals: &[String],
    ) -> Result<(), (String, String)> {
        match power {
            None => return Err(("controllers.power".into(), "a power_glitch fault needs a power switch".into())),
            Some(p) if !self.quarch_hotplug(power) => {
                return Err((
                    "controllers.power".into(),
                    format!(
                        "a power_glitch needs a Quarch hot-plug module's glitch engine (for the simulated drive: switch = \
                         \"quarch_hotplug_serial\"); {p} can cut the power, not glitch it"
                    ),
                ))
            }
            Some(_) => {}
        }
        if !(1..=127_500_000).contains(&length_us) {
            return Err((format!("{field}.length_us"), format!("{length_us}: expected 1 to 127500000 (the glitch engine's 127.5 s)")));
        }
        let name_ok = |n: &String| (1..=32).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if signals.is_empty() || signals.len() > 16 {
            return Err((format!("{field}.signals"), format!("{} signals: expected 1 to 16", signals.len())));
        }
        if let Some((i, n)) = signals.iter().enumerate().find(|(_, n)| !name_ok(n)) {
            return Err((format!("{field}.signals[{i}]"), format!("{n:?}: a module's signal name (letters, digits, _; 1 to 32)")));
        }
        Ok(())
    }

    /// A `power_sag` or `power_ramp` (`kind`, at `field`) fits the power switch: a Quarch
    /// power module's programmable rail (for the simulated drive, its emulator; a real Quarch
    /// module is known for one only once it answers, and a hot-plug module refuses then).
    fn check_rail_shape(
        &self,
        field: &str,
        power: Option<&ControllerSpec>,
        kind: &str,
        rail: &str,
        to_mv: u32,
        (time_field, ms): (&str, u32),
    ) -> Result<(), (String, String)> {
        let power_module = match &self.target.sim {
            Some(sim) => matches!(sim.switch, SimSwitch::QuarchSerial | SimSwitch::QuarchTcp),
            None => matches!(power, Some(ControllerSpec::Quarch { .. })),
        };
        match power {
            None => return Err(("controllers.power".into(), format!("a {kind} fault needs a power switch"))),
            Some(p) if !power_module => {
                return Err((
                    "controllers.power".into(),
                    format!(
                        "a {kind} needs a Quarch power module's programmable rail (for the simulated drive: switch = \
                         \"quarch_serial\" or \"quarch_tcp\"); {p} can cut the power, not set its voltage"
                    ),
                ))
            }
            Some(_) => {}
        }
        let Some(max) = faultline_drivers::control::quarch::rail_limit_mv(rail) else {
            return Err((format!("{field}.rail"), format!("{rail:?}: a power module's rails are \"12V\", \"5V\" and \"3V3\"")));
        };
        if to_mv > max {
            return Err((format!("{field}.to_mv"), format!("{to_mv}: the {rail} rail takes 0 to {max} mV")));
        }
        if !(1..=600_000).contains(&ms) {
            return Err((format!("{field}.{time_field}"), format!("{ms}: expected 1 to 600000 (ten minutes)")));
        }
        Ok(())
    }

    /// `[[ports]]` and `[dual]` fit each other and the target.
    fn validate_ports(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        let sim = self.target.sim.as_ref();
        let ports = super::ports::plan_ports(origin, &self.ports, sim.is_some())?;
        let dual_sim = sim.is_some_and(|s| s.dual.is_some());
        if dual_sim && !(self.ports.is_empty() || self.ports.len() == 2) {
            return bad("ports", format!("{} ports: the simulated dual-port drive has two, A and B", self.ports.len()));
        }
        if let Some(model) = sim.filter(|s| s.dual.is_some() && s.model != super::SimModel::HonestPlp).map(|s| s.model) {
            return bad(
                "target.sim.model",
                format!(
                    "{model:?}: the simulated dual-port drive is honest_plp underneath; its faults are target.sim.dual.model (a lossy cache at a power cut is dual_lose_cache_at_cut)"
                ),
            );
        }
        if sim.is_some() && !dual_sim && !self.ports.is_empty() {
            return bad("ports", "the simulated drive has one port: give target.sim.dual for a dual-port drive".into());
        }
        let n = if dual_sim && ports.is_empty() { 2 } else { ports.len() };
        match &self.dual {
            None if n > 1 => {
                bad("dual", "a drive with several ports needs a [dual] table (which port each fault hits, the budgets)".into())
            }
            None => Ok(()),
            Some(_) if n < 2 => bad("dual", "a dual-port run needs two ports: [[ports]] A and B, or target.sim.dual".into()),
            Some(d) => {
                super::ports::validate_dual(origin, d)?;
                for (i, f) in self.fault.each().into_iter().enumerate() {
                    let at = if matches!(self.fault, Fault::Mixed { .. }) { format!("fault.faults[{i}].fault") } else { "fault".into() };
                    if matches!(f, Fault::LinkReset { port: Some(_), .. }) {
                        return bad(
                            &format!("{at}.port"),
                            "a dual-port run names the faulted ports in dual.fault_ports (and each port's fault_port)".into(),
                        );
                    }
                    if matches!(f, Fault::CleanShutdown | Fault::NormalShutdown) {
                        return bad(
                            &format!("{at}.kind"),
                            format!("{} is a single-port case; a dual-port run faults one port under load", f.kind_name()),
                        );
                    }
                }
                let ports = if ports.is_empty() { super::ports::default_sim_ports() } else { ports };
                super::ports::plan_fault_ports(origin, d, &ports)?;
                Ok(())
            }
        }
    }

    /// The cut placement's numbers are usable.
    fn validate_cut(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        match self.cut {
            CutPlacement::UniformTime { window_start_ms, window_end_ms } => {
                if window_end_ms < window_start_ms || window_end_ms == 0 {
                    return bad(
                        "cut.window_end_ms",
                        format!("window [{window_start_ms}, {window_end_ms}] ms: the end must be positive and not before the start"),
                    );
                }
            }
            CutPlacement::AfterCompletions { completions } => {
                if completions == 0 {
                    return bad("cut.completions", "must be at least 1".into());
                }
            }
            CutPlacement::UniformCompletions { min_completions, max_completions } => {
                if min_completions == 0 || max_completions < min_completions {
                    return bad(
                        "cut.max_completions",
                        format!("[{min_completions}, {max_completions}]: expected 1 <= min_completions <= max_completions"),
                    );
                }
            }
            CutPlacement::WhileFlushOutstanding { .. } => {}
            CutPlacement::DuringFormat { min_cut_ms, max_cut_ms, .. } => {
                if max_cut_ms < min_cut_ms || max_cut_ms > 600_000 {
                    return bad(
                        "cut.max_cut_ms",
                        format!("[{min_cut_ms}, {max_cut_ms}] ms: expected min_cut_ms <= max_cut_ms <= 600000 (nvme-cli's format timeout)"),
                    );
                }
            }
            CutPlacement::WhileIdle { after_completions } => {
                if after_completions == 0 {
                    return bad("cut.after_completions", "must be at least 1: the drive must hold data to lose".into());
                }
            }
        }
        Ok(())
    }

    /// Cycles, verification and the stop policy.
    fn validate_cycles(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        let c = &self.cycles;
        if c.count == 0 {
            return bad("cycles.count", "must be at least 1".into());
        }
        if let Err((at, message)) = c.off_time_ms.check() {
            return bad(&format!("cycles.off_time_ms{at}"), message);
        }
        if c.readiness_timeout_s == 0 || c.readiness_timeout_s > 86_400 {
            return bad("cycles.readiness_timeout_s", format!("{}: expected 1 to 86400 (one day)", c.readiness_timeout_s));
        }
        if !self.verify.sample_bytes.is_multiple_of(512) {
            return bad("verify.sample_bytes", format!("{} is not a multiple of 512", self.verify.sample_bytes));
        }
        if self.stop.max_consecutive_harness_errors == 0 {
            return bad("stop.max_consecutive_harness_errors", "must be at least 1".into());
        }
        Ok(())
    }

    /// The target: the simulated drive alone, a target on another host, or a device on this host.
    fn validate_target(&self, origin: &str) -> Result<(), ScenarioError> {
        let t = &self.target;
        let identity = t.serial.is_some() || t.wwid.is_some() || t.model.is_some() || t.size_bytes.is_some();
        let selector = t.cntlid.is_some() || t.pci_address.is_some() || t.controller.is_some();
        if let Some(sim) = &t.sim {
            return validate_sim_target(origin, t, sim, identity || selector);
        }
        if t.transport.is_some() && t.host.is_none() {
            return Err(invalid(origin, "target.transport", "a transport reaches another host: give target.host too".into()));
        }
        if let Some(host) = &t.host {
            return self.validate_remote_target(origin, host, selector);
        }
        validate_local_target(origin, t, identity, selector)
    }

    /// A target on another host: named by its path there, reached by a transport, in no port table.
    fn validate_remote_target(&self, origin: &str, host: &str, selector: bool) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        let t = &self.target;
        if host.trim().is_empty() {
            return bad("target.host", "must not be empty (leave it out for a target on this host)".into());
        }
        if t.path.is_none() {
            return bad("target.path", format!("the target on {host}, as its agent's --target lists it, is needed with target.host"));
        }
        if selector {
            return bad(
                "target.host",
                "a target on another host is named by its path there (the agent's --target): give no cntlid, pci_address or controller"
                    .into(),
            );
        }
        if let Some(argv) = &t.transport {
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                return bad("target.transport", "the transport command is empty: give its program first".into());
            }
        }
        if self.workload.prefill {
            return bad("workload.prefill", "the prefill of a target on another host is not carried by the agent protocol yet".into());
        }
        if self.dual.is_some() || !self.ports.is_empty() {
            return bad(
                "target.host",
                "a dual-port run names each port's host in its [[ports]] table (host, transport, host_power), not in [target]: \
                 leave target.host out"
                    .into(),
            );
        }
        Ok(())
    }

    fn validate_workload(&self, origin: &str, sector: u64, capacity: Option<u64>) -> Result<(), ScenarioError> {
        let bad =
            |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
        let w = &self.workload;
        if !w.align_bytes.is_power_of_two() || w.align_bytes < sector {
            return bad("workload.align_bytes", format!("{}: expected a power of two, at least the sector size {sector}", w.align_bytes));
        }
        let mut sizes = vec![
            ("workload.min_write_bytes", w.min_write_bytes),
            ("workload.max_write_bytes", w.max_write_bytes),
            ("workload.mean_write_bytes", w.mean_write_bytes),
            ("workload.span_start_bytes", w.span_start_bytes),
        ];
        sizes.extend(w.span_end_bytes.map(|e| ("workload.span_end_bytes", e)));
        for (field, v) in sizes {
            if v % w.align_bytes != 0 {
                return bad(field, format!("{v} is not a multiple of align_bytes {}", w.align_bytes));
            }
        }
        if w.min_write_bytes == 0 || w.min_write_bytes > w.max_write_bytes {
            return bad(
                "workload.min_write_bytes",
                format!("{}: expected positive and at most max_write_bytes {}", w.min_write_bytes, w.max_write_bytes),
            );
        }
        if w.max_write_bytes > 16 << 20 {
            return bad("workload.max_write_bytes", format!("{} is above the 16 MiB limit", w.max_write_bytes));
        }
        if w.mean_write_bytes < w.min_write_bytes || w.mean_write_bytes > w.max_write_bytes {
            return bad(
                "workload.mean_write_bytes",
                format!("{}: expected between min_write_bytes and max_write_bytes", w.mean_write_bytes),
            );
        }
        if w.queue_depth == 0 || w.queue_depth > 4096 {
            return bad("workload.queue_depth", format!("{}: expected 1 to 4096", w.queue_depth));
        }
        if w.flush.fua_percent > 100 {
            return bad("workload.flush.fua_percent", format!("{}: expected 0 to 100", w.flush.fua_percent));
        }
        if let Err((field, message)) = w.ops.mix() {
            return bad(field, message);
        }
        if w.flush.every_writes == Some(0) {
            return bad("workload.flush.every_writes", "must be positive (leave it out for no flushes)".into());
        }
        if w.flush.every_ms == Some(0) {
            return bad("workload.flush.every_ms", "must be positive (leave it out for no timed flushes)".into());
        }
        if let Pattern::HotCold { hot_span_percent, hot_write_percent } = w.pattern {
            if !(1..=99).contains(&hot_span_percent) {
                return bad("workload.pattern.hot_span_percent", format!("{hot_span_percent}: expected 1 to 99"));
            }
            if !(1..=99).contains(&hot_write_percent) {
                return bad("workload.pattern.hot_write_percent", format!("{hot_write_percent}: expected 1 to 99"));
            }
        }
        if let (Some(end), Some(cap)) = (w.span_end_bytes, capacity) {
            if end > cap {
                return bad("workload.span_end_bytes", format!("{end} is past the end of the target ({cap} bytes)"));
            }
        }
        let end = match (w.span_end_bytes, capacity) {
            (Some(end), _) => end,
            (None, Some(cap)) => cap / w.align_bytes * w.align_bytes,
            (None, None) => w.span_start_bytes.saturating_add(w.max_write_bytes.saturating_mul(PARSE_SPAN_CHUNKS)),
        };
        if end <= w.span_start_bytes {
            let field = if w.span_end_bytes.is_some() { "workload.span_end_bytes" } else { "workload.span_start_bytes" };
            return bad(field, format!("the span [{}, {end}) is empty", w.span_start_bytes));
        }
        Layout::new(self.workload_spec_with_end(end, 0), sector).map(drop).map_err(|e| ScenarioError::Invalid {
            origin: origin.to_string(),
            field: "workload".into(),
            message: e.to_string(),
        })
    }
}

/// A scenario error naming `field` of the scenario `origin`.
fn invalid(origin: &str, field: &str, message: String) -> ScenarioError {
    ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message }
}

/// The simulated drive: no other target key (`other_keys`: an identity or a path selector), a
/// sector of 512 or 4096, an atomic unit, a capacity and a queue depth that fit it.
fn validate_sim_target(origin: &str, t: &Target, sim: &SimTarget, other_keys: bool) -> Result<(), ScenarioError> {
    let bad = |field: &str, message: String| Err(invalid(origin, field, message));
    if t.path.is_some() || other_keys || t.atomic_bytes.is_some() || t.host.is_some() || t.transport.is_some() {
        return bad(
            "target.sim",
            "the simulated drive takes no path, serial, wwid, model, size_bytes, host, transport or atomic_bytes fields (its own: sim.atomic_bytes)".into(),
        );
    }
    if sim.sector_bytes != 512 && sim.sector_bytes != 4096 {
        return bad("target.sim.sector_bytes", format!("{}: expected 512 or 4096", sim.sector_bytes));
    }
    if !sim.atomic_bytes.is_power_of_two() || sim.atomic_bytes < sim.sector_bytes {
        return bad(
            "target.sim.atomic_bytes",
            format!("{}: expected a power of two, at least sector_bytes {}", sim.atomic_bytes, sim.sector_bytes),
        );
    }
    if sim.capacity_bytes == 0 || !sim.capacity_bytes.is_multiple_of(sim.sector_bytes as u64) {
        return bad("target.sim.capacity_bytes", format!("{}: expected a positive multiple of sector_bytes", sim.capacity_bytes));
    }
    if sim.queue_depth == 0 {
        return bad("target.sim.queue_depth", "must be at least 1".into());
    }
    // A detector below the drive's brown-out (10 000 mV) is the fault; at or above it the
    // drive is honest, and at 0 it never trips (the drive would run on no power at all).
    if let SimModel::PfailMissesSag { detect_mv } = sim.model {
        if !(1..faultline_fixtures::BROWNOUT_MV).contains(&detect_mv) {
            let max = faultline_fixtures::BROWNOUT_MV - 1;
            return bad("target.sim.model.detect_mv", format!("{detect_mv}: expected 1 to {max}, under the drive's 10000 mV brown-out"));
        }
    }
    sim.model.zeroing_fault(sim).map_or(Ok(()), |(field, message)| bad(field, message))
}

/// A device on this host: found by its path, its identity, or an identity and a selector of
/// one of its paths; each given field well-formed.
fn validate_local_target(origin: &str, t: &Target, identity: bool, selector: bool) -> Result<(), ScenarioError> {
    let bad = |field: &str, message: String| Err(invalid(origin, field, message));
    if t.path.is_none() && !identity && !selector {
        return bad("target", "no way to find the device: give path, or serial, wwid, model or size_bytes, or sim".into());
    }
    if selector && t.path.is_some() {
        return bad(
            "target",
            "target.path names the path already: give it, or target.cntlid / pci_address / controller with the identity".into(),
        );
    }
    if selector && !identity {
        return bad(
            "target",
            "target.cntlid / pci_address / controller pick one path of a namespace: give the namespace's identity too (serial, wwid, model or size_bytes)".into(),
        );
    }
    for (field, v) in [("target.pci_address", &t.pci_address), ("target.controller", &t.controller)] {
        if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return bad(field, "must not be empty (leave it out instead)".into());
        }
    }
    if let Some(a) = t.atomic_bytes {
        if !a.is_power_of_two() || !(512..=1 << 20).contains(&a) {
            return bad("target.atomic_bytes", format!("{a}: expected a power of two from 512 to 1048576"));
        }
    }
    if let Some(p) = &t.path {
        validate_target_path(origin, t, p)?;
    }
    for (field, v) in [("target.serial", &t.serial), ("target.wwid", &t.wwid), ("target.model", &t.model)] {
        if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return bad(field, "must not be empty (leave it out instead)".into());
        }
    }
    if t.size_bytes == Some(0) {
        return bad("target.size_bytes", "must be positive".into());
    }
    Ok(())
}

/// `target.path`: an absolute path, or an NBD URI that parses and comes with no identity field
/// but the size (an export has no serial, WWID, model or controller).
fn validate_target_path(origin: &str, t: &Target, p: &std::path::Path) -> Result<(), ScenarioError> {
    let bad = |field: &str, message: String| Err(invalid(origin, field, message));
    match p.to_str().filter(|s| faultline_drivers::nbd::looks_like_nbd(s)) {
        Some(uri) => {
            if let Err(e) = faultline_drivers::nbd::NbdUri::parse(uri) {
                return bad("target.path", e.to_string());
            }
            let given = [
                ("serial", t.serial.is_some()),
                ("wwid", t.wwid.is_some()),
                ("model", t.model.is_some()),
                ("cntlid", t.cntlid.is_some()),
                ("pci_address", t.pci_address.is_some()),
                ("controller", t.controller.is_some()),
            ];
            if let Some((k, _)) = given.iter().find(|(_, g)| *g) {
                return bad(
                    &format!("target.{k}"),
                    "an NBD export has no serial, WWID, model or controller: its URI names it (target.size_bytes checks its size)".into(),
                );
            }
            Ok(())
        }
        None if !p.is_absolute() => bad(
            "target.path",
            format!("{}: expected an absolute path, or an NBD URI (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH)", p.display()),
        ),
        None => Ok(()),
    }
}

pub(super) fn parse_controller(origin: &str, field: &str, spec: Option<&str>) -> Result<Option<ControllerSpec>, ScenarioError> {
    spec.map(|s| {
        parse_spec(s).map_err(|e| ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message: e.to_string() })
    })
    .transpose()
}
