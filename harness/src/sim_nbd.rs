//! The simulated drive (or one port of the dual-port one) served over NBD: the one place that
//! starts an [`NbdServer`], for `faultline emulate nbd`, the lab's simulated drive (`lab/sim.rs`)
//! and a run whose ports are on other hosts (`runner/dual/served.rs`). The server names each
//! write by the sector format's header ([`crate::format::claimed_write_id`]: the simulator never
//! parses a sector, this injects the decoder), and listens on a Unix socket or a TCP address.

use faultline_fixtures::nbd::{NbdBackend, NbdConfig, NbdEvent, NbdServer};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Hears every event of a server (connections, refusals), for a log.
pub type EventLog = Box<dyn Fn(&NbdEvent) + Send + Sync>;

/// Where the export listens.
#[derive(Clone, Copy, Debug)]
pub enum Listen<'a> {
    Unix(&'a Path),
    Tcp(SocketAddr),
}

/// The export: its name, what `NBD_INFO_DESCRIPTION` says of it, and the drive's service time
/// (one completion per this while operations are in flight; zero: at once).
#[derive(Clone, Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub service_time: Duration,
}

/// Where an export was bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

/// A drive being served: dropping it stops the server.
pub struct Served {
    pub server: NbdServer,
    pub bound: Bound,
    export: String,
}

impl Served {
    /// The NBD URI of the export (`nbd+unix:///NAME?socket=PATH`, `nbd://HOST:PORT/NAME`).
    pub fn uri(&self) -> String {
        match &self.bound {
            Bound::Unix(p) => format!("nbd+unix:///{}?socket={}", self.export, p.display()),
            Bound::Tcp(a) => format!("nbd://{a}/{}", self.export),
        }
    }

    /// Where it listens, as a person reads it (the socket's path, the bound address).
    pub fn endpoint(&self) -> String {
        match &self.bound {
            Bound::Unix(p) => p.display().to_string(),
            Bound::Tcp(a) => a.to_string(),
        }
    }

    /// QEMU's `-drive` options reaching the export (without `if=`, `id=` or cache options).
    pub fn qemu_drive(&self) -> String {
        let e = &self.export;
        match &self.bound {
            Bound::Unix(p) => format!("driver=nbd,server.type=unix,server.path={},export={e}", p.display()),
            Bound::Tcp(a) => format!("driver=nbd,server.type=inet,server.host={},server.port={},export={e}", a.ip(), a.port()),
        }
    }
}

/// Serves `drive` as `export` at `at`; `log` hears every event of the server (connections,
/// refusals) from before it listens. The error is the listener's (the socket in use, ...).
pub fn serve(drive: impl NbdBackend, export: Export, at: Listen<'_>, log: Option<EventLog>) -> io::Result<Served> {
    let Export { name, description, service_time } = export;
    let cfg = NbdConfig { export_name: name.clone(), description, service_time };
    let mut server = NbdServer::start(drive, Box::new(crate::format::claimed_write_id), cfg);
    if let Some(log) = log {
        server.on_event(log);
    }
    let bound = match at {
        Listen::Unix(p) => {
            server.listen_unix(p)?;
            Bound::Unix(p.to_path_buf())
        }
        Listen::Tcp(a) => Bound::Tcp(server.listen_tcp(a)?),
    };
    Ok(Served { server, bound, export: name })
}

/// Names each trim or write zeroes reaching a drive with the id the run's workload gave it:
/// the first id (from a little behind the newest named, as the queue reorders) whose
/// operation has that extent and kind. A request the workload has no such id for (split or
/// merged on the way) is left to the server's own counter (`faultline_fixtures::nbd`).
pub fn workload_namer(layout: crate::workload::Layout) -> faultline_fixtures::nbd::ZeroNamer {
    let named = std::sync::Mutex::new(Named::default());
    Box::new(move |offset, len, kind| {
        let mut n = named.lock().unwrap_or_else(|p| p.into_inner());
        let from = n.newest.saturating_sub(REORDER).max(1);
        let id = (from..from + SEARCH).find(|&id| {
            let w = layout.plan(id);
            w.offset == offset && w.len == len && w.zeroing() == Some(kind) && !n.recent.contains(&id)
        })?;
        n.newest = n.newest.max(id);
        n.recent.insert(id);
        let floor = n.newest.saturating_sub(REORDER);
        n.recent.retain(|&r| r >= floor);
        Some(id)
    })
}

/// Ids named lately: the newest, and those within [`REORDER`] of it.
#[derive(Default)]
struct Named {
    newest: u64,
    recent: std::collections::BTreeSet<u64>,
}

/// How far behind the newest named id a request may still be (a queue of 4096 at most).
const REORDER: u64 = 4096;
/// How many ids a request is looked for among.
const SEARCH: u64 = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{FlushPolicy, Layout, OpMix, Pattern, WorkloadSpec, Zeroing};

    #[test]
    fn trims_and_write_zeroes_are_named_with_the_workload_ids_in_any_order_nearby() {
        let spec = WorkloadSpec {
            seed: 5,
            pattern: Pattern::Random {},
            span_start: 0,
            span_end: 8 << 20,
            min_write_bytes: 4096,
            max_write_bytes: 65536,
            mean_write_bytes: 16384,
            align_bytes: 4096,
            queue_depth: 32,
            flush: FlushPolicy::default(),
            ops: OpMix { deallocate_ppm: 100_000, write_zeroes_ppm: 100_000 },
        };
        let layout = Layout::new(spec, 512).unwrap();
        let namer = workload_namer(layout.clone());
        let mut zeroing: Vec<_> = (1..2000).map(|id| layout.plan(id)).filter(|w| w.zeroing().is_some()).collect();
        // Swapped pairs: the queue completes them out of order.
        for pair in zeroing.chunks_mut(2) {
            pair.reverse();
        }
        for w in &zeroing {
            assert_eq!(namer(w.offset, w.len, w.zeroing().unwrap()), Some(w.id), "{w:?}");
        }
        // A request the workload never made (merged with its neighbour) gets no id.
        let w = zeroing[0];
        assert_eq!(namer(w.offset, w.len + 4096 * 1000, Zeroing::Deallocate), None);
    }
}
