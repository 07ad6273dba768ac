//! faultline's end-to-end tests, as one test binary (the workspace is linked once, not once
//! a file; ripgrep's `tests/tests.rs` is the model). One module a file; what they share
//! (scratch directories, running the binary, skipping with a printed reason, seeded inputs)
//! is in `common`. Run one part with `cargo test -p faultline --test integration MODULE::`.
//!
//! Tests run two at a time (libtest's default on two cores) across every module; the ones whose
//! verdict rests on timing take `common::alone()`, the heavy ones `common::shared()`.

mod common;

/// Agents over a real OpenSSH server on loopback: two hosts sharing a drive, killed agents and
/// coordinators, hostile coordinators.
mod agent;

/// Loop devices, the io_uring engine and the safety guards (needs root; skips with a printed
/// reason otherwise).
mod blockdev;

/// The real `faultline` binary's commands on real files in scratch directories.
mod cli;

/// Every power-controller driver against its protocol emulator (ptys, loopback TCP).
mod controllers;

/// The detection matrix: every simulated fault model found, the honest ones clean.
mod detection_matrix;

/// The drivers' parsers of untrusted input (controller specs and replies, the Identify page)
/// against arbitrary and mutated bytes.
mod driver_parsers;

/// Dual-port runs on the simulated dual-port drive (matrix rows, the demo, refusals).
mod dualport;

/// The dual-port runner on two loop devices over one file (two paths to one medium), a port
/// pulled through an `exec:` link controller (needs root; skips with a printed reason).
mod dualport_loop;

/// docs/examples/ (systemd, GitLab, Jenkins, Kubernetes) parsed, and their command lines checked
/// against the real argument parser.
mod examples;

/// `faultline report --fleet` over runs of the real binary.
mod fleet;

/// docs/FORMAT.md's worked example recomputed with the code.
mod format_doc;

/// The runner against the kernel-facing link controllers, on a fake sysfs and `/dev` tree.
mod kernel_faults;

/// `faultline lab`: the real Linux NVMe driver in a QEMU guest on an emulated dual-port drive
/// (.ci/run runs `faultline lab setup` first; one boot per test, serialised).
mod lab;

/// `--metrics-file` / `--metrics-listen` parsed by the Prometheus Python parser (.ci/run installs
/// it).
mod metrics;

/// The NBD server in front of the simulated drive against QEMU's own clients, qemu-io and qemu-
/// img (Debian's qemu-utils, installed by .ci/run when missing), and `faultline emulate nbd`.
mod nbd;

/// Every parser of untrusted input (scenario files, the event log, the ledger, sectors, SMART
/// pages) against arbitrary and mutated bytes, from fixed seeds.
mod parsers;

/// Quarch's own Python client (quarchpy, installed by .ci/run) against `faultline emulate`.
mod quarchpy;

/// report.html in headless Chromium (the Debian package, installed by .ci/run): the rendered DOM,
/// the charts' layout and ticks, and no fetch.
mod report_browser;

/// The reports (event log, summary.json, junit.xml, report.html) and `faultline report`.
mod reports;

/// `faultline resume` after SIGKILL at seeded moments reaches an uninterrupted run's verdict.
mod resume;

/// `faultline run SCENARIO.toml` end to end: simulated drives through every emulated switch.
mod runner;

/// Every shipped scenario file parses and validates; the committed JSON Schema is current.
mod scenarios;

/// `faultline verify` remembers which in-flight writes it saw land, and a later verify holds
/// the drive to them.
mod seen;

/// The static (musl) binary and the container image built from the repository's Containerfile
/// (musl-tools, buildah and debootstrap from Debian, installed by .ci/run).
mod ship;

/// Dual-port runs whose ports are on other hosts, each reached through its agent: host power
/// cuts and shutdowns, cross-port verification and the performance mode over the wire.
mod two_hosts;

/// `faultline watch` following a live run, and one killed (SIGKILL) and resumed meanwhile.
mod watch;
