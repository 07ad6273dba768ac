//! `--metrics-file PATH` and `--metrics-listen ADDR` of `faultline run` and `resume`: the
//! library's [`RunMetrics`] (folded from the run's events) written to a file for
//! node_exporter's textfile collector, and served at `GET /metrics` over HTTP (tiny_http, on
//! a thread of its own). Neither can harm the run: a failed write is warned about once on
//! stderr and the run goes on; the file is replaced whole (a temporary file in the same
//! directory, then a rename), so a reader never sees half of it.

use anyhow::{Context, Result};
use faultline::events::{Event, EventKind, EventSink, SinkError};
use faultline::metrics::{RunMetrics, CONTENT_TYPE};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The address `--metrics-listen` takes when given without one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

#[derive(clap::Args, Clone, Default)]
pub struct MetricsArgs {
    /// Write the run's metrics (Prometheus text format) to PATH after every cycle, at the
    /// start and at the end, replacing it whole (for node_exporter's textfile collector: give
    /// it a name ending in .prom in the collector's directory). See docs/METRICS.md.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Serve the run's metrics at http://ADDR/metrics (default 127.0.0.1:9464; port 0 picks a
    /// free one, printed on stderr). An address that is not loopback is served with a warning.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = DEFAULT_LISTEN)]
    pub metrics_listen: Option<String>,
}

/// The event consumer that keeps the metrics and writes the file.
pub struct MetricsFeed {
    metrics: Arc<Mutex<RunMetrics>>,
    file: Option<PathBuf>,
    warned: bool,
}

impl MetricsFeed {
    /// Opens what `a` asks for; `None` when it asks for nothing. Fails only when the listener
    /// cannot be bound (the run has not started then).
    pub fn start(a: &MetricsArgs) -> Result<Option<MetricsFeed>> {
        if a.metrics_file.is_none() && a.metrics_listen.is_none() {
            return Ok(None);
        }
        let metrics = Arc::new(Mutex::new(RunMetrics::new()));
        if let Some(addr) = &a.metrics_listen {
            serve(addr, Arc::clone(&metrics))?;
        }
        Ok(Some(MetricsFeed { metrics, file: a.metrics_file.clone(), warned: false }))
    }

    fn write_file(&mut self) {
        let Some(path) = &self.file else { return };
        let text = self.metrics.lock().unwrap_or_else(PoisonError::into_inner).render();
        if let Err(e) = write_replacing(path, &text) {
            if !self.warned {
                eprintln!("faultline: warning: cannot write the metrics file ({e:#}); the run goes on, further failures unreported");
                self.warned = true;
            }
        }
    }
}

impl EventSink for MetricsFeed {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.metrics.lock().unwrap_or_else(PoisonError::into_inner).apply(e);
        if matches!(
            e.kind,
            EventKind::RunStarted { .. }
                | EventKind::CycleEnded { .. }
                | EventKind::RunResumed { .. }
                | EventKind::RunSuspended { .. }
                | EventKind::RunStopped { .. }
                | EventKind::RunEnded { .. }
        ) {
            self.write_file();
        }
        Ok(())
    }
}

/// Replaces `path` whole: a temporary file beside it (a dot file, which the textfile
/// collector does not read), then a rename.
fn write_replacing(path: &Path, text: &str) -> Result<()> {
    let name = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// Binds `addr` and answers `GET /metrics` on a thread until the process ends.
fn serve(addr: &str, metrics: Arc<Mutex<RunMetrics>>) -> Result<()> {
    let wanted: SocketAddr = addr.parse().with_context(|| format!("--metrics-listen {addr}: not an address like 127.0.0.1:9464"))?;
    if !wanted.ip().is_loopback() {
        eprintln!(
            "faultline: WARNING: serving metrics on {wanted}, which is not a loopback address: anyone who can reach this host \
             can read the run's metrics (target identity included)"
        );
    }
    let server = tiny_http::Server::http(wanted).map_err(|e| anyhow::anyhow!("--metrics-listen {addr}: cannot listen: {e}"))?;
    let bound = server.server_addr().to_ip().map_or_else(|| wanted.to_string(), |a| a.to_string());
    eprintln!("faultline: metrics on http://{bound}/metrics");
    let header = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).expect("a valid header");
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let path = req.url().split('?').next().unwrap_or_default();
                let r = if *req.method() == tiny_http::Method::Get && path == "/metrics" {
                    let text = metrics.lock().unwrap_or_else(PoisonError::into_inner).render();
                    req.respond(tiny_http::Response::from_string(text).with_header(header.clone()))
                } else {
                    req.respond(tiny_http::Response::from_string("faultline serves GET /metrics only\n").with_status_code(404))
                };
                // A scraper that hung up is its own problem, not the run's.
                drop(r);
            }
        })
        .context("cannot start the metrics thread")?;
    Ok(())
}
