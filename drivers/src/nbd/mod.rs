//! An NBD export as a block target: `nbd+unix:///EXPORT?socket=PATH` or
//! `nbd://HOST[:PORT]/EXPORT` ([`uri`]), reached over one connection with the fixed newstyle
//! handshake and simple replies ([`proto`]). Any NBD server serves: `qemu-nbd`, `nbdkit`, a
//! network block service, faultline's own (`faultline emulate nbd`).
//!
//! Writes and flushes are pipelined up to the queue depth: each request is sent at submission
//! and its reply, matched by cookie, completes it when the target reaps. A write with FUA is
//! sent with `NBD_CMD_FLAG_FUA` when the export takes it; on an export that takes flushes and
//! not FUA, it is sent as a write and a flush, and completes when both have (a flush makes
//! every completed write durable, so the promise holds, at a flush's cost). An export that
//! takes neither makes nothing durable on demand: a FUA write or a flush fails `EOPNOTSUPP`,
//! saying so, so that no run counts such a write durable. Deallocate and write zeroes are
//! `NBD_CMD_TRIM` and `NBD_CMD_WRITE_ZEROES`, where the export offers them (`zero.rs`).
//! Verification reads are synchronous, split at the export's largest payload.
//!
//! The connection is the device: when it ends (the server went away, or the power of the drive
//! behind it was cut and the server dropped its clients) every operation in flight fails
//! `ESHUTDOWN`, which a caller takes as the device gone, and so does every later one; a
//! target is opened again by connecting again. A reply that breaks the protocol ends the
//! connection the same way, with `EPROTO` and what was wrong.

mod conn;
pub mod proto;
pub mod uri;
mod zero;

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, TargetError, Zeroing, ZeroingSupport};
use crate::latency::LatencyHistogram;
use conn::Conn;
use proto::{Export, HandshakeError};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
pub use uri::{looks_like_nbd, Endpoint, NbdUri, UriError, UriProblem};

/// How long connecting and the handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sending one request may block (a server that stopped reading).
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a verification read waits for its reply unless told otherwise.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Consecutive EIO replies after which the export is taken as gone, as the local engines do.
const EIO_GONE_AFTER: u32 = 8;
/// Latency histograms, by operation.
const LAT_NAMES: [&str; 6] = ["write", "write_fua", "flush", "read", "deallocate", "write_zeroes"];

/// A reply that breaks the protocol.
#[derive(Debug, thiserror::Error)]
enum BadReply {
    #[error("{0}")]
    Head(#[from] proto::ReplyError),
    #[error("a reply to cookie {0} that no request in flight has")]
    Cookie(u64),
}

/// Why an export could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NbdOpenError {
    #[error("{0}")]
    Uri(#[source] uri::UriError),
    #[error("cannot connect to {uri}: {source}")]
    Connect { uri: String, source: io::Error },
    #[error("{uri}: {source}")]
    Handshake { uri: String, source: HandshakeError },
    #[error("{uri}: {why}")]
    Unusable { uri: String, why: String },
}

/// What a request in flight is, by its cookie.
enum Pending {
    /// A write; `then_flush`: a FUA write on an export without FUA, whose flush is sent once
    /// the write has completed (a flush covers only the writes the server completed before it).
    Write {
        token: u64,
        buf: AlignedBuf,
        fua: bool,
        started: Instant,
        then_flush: bool,
    },
    Flush {
        token: u64,
        started: Instant,
    },
    /// A trim or write zeroes (`zero.rs`).
    Zero {
        token: u64,
        kind: Zeroing,
        started: Instant,
    },
    /// The flush that makes a completed write durable (a FUA write on an export without FUA).
    FuaFlush {
        token: u64,
        started: Instant,
        buf: AlignedBuf,
    },
    /// A verification read of `len` bytes; `abandoned` once its caller stopped waiting.
    Read {
        len: usize,
        abandoned: bool,
    },
}

/// An NBD export, opened.
pub struct NbdTarget {
    uri: NbdUri,
    conn: Conn,
    export: Export,
    geometry: Geometry,
    depth: usize,
    writable: bool,
    next_cookie: u64,
    pending: HashMap<u64, Pending>,
    /// Operations the caller submitted and has not reaped (a FUA write's two requests count
    /// once).
    ops: usize,
    done: VecDeque<Completion>,
    /// Bytes read and not yet a whole reply.
    rbuf: Vec<u8>,
    gone: Option<IoFailure>,
    eio_run: u32,
    read_timeout: Duration,
    /// Replies to reads, by cookie, that arrived while another wait was reading.
    read_data: HashMap<u64, Result<Vec<u8>, IoFailure>>,
    lat: [LatencyHistogram; 6],
}

impl NbdTarget {
    /// Connects to `uri` and negotiates its export; refuses a read-only export for writing.
    pub fn open(uri: &NbdUri, writable: bool, depth: usize) -> Result<NbdTarget, NbdOpenError> {
        let shown = uri.text.clone();
        let connect = |source| NbdOpenError::Connect { uri: shown.clone(), source };
        let conn = match &uri.endpoint {
            Endpoint::Unix(p) => Conn::Unix(UnixStream::connect(p).map_err(connect)?),
            Endpoint::Tcp { host, port } => {
                use std::net::ToSocketAddrs;
                let addrs: Vec<_> = (host.as_str(), *port).to_socket_addrs().map_err(connect)?.collect();
                let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address"));
                let mut conn = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            conn = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                Conn::Tcp(conn.ok_or_else(|| connect(last))?)
            }
        };
        NbdTarget::over(uri, conn, writable, depth)
    }

    /// Negotiates the export over a connection made.
    fn over(uri: &NbdUri, mut conn: Conn, writable: bool, depth: usize) -> Result<NbdTarget, NbdOpenError> {
        let shown = uri.text.clone();
        let _ = conn.set_read_timeout(Some(CONNECT_TIMEOUT));
        let _ = conn.set_write_timeout(Some(SEND_TIMEOUT));
        let export =
            proto::client_handshake(&mut conn, &uri.export).map_err(|source| NbdOpenError::Handshake { uri: shown.clone(), source })?;
        let unusable = |why: String| NbdOpenError::Unusable { uri: shown.clone(), why };
        if writable && export.read_only() {
            return Err(unusable("the export is read-only (NBD_FLAG_READ_ONLY)".into()));
        }
        let logical = export.min_block.unwrap_or(1).max(512);
        if export.size == 0 || export.size % u64::from(logical) != 0 {
            return Err(unusable(format!("its size, {} bytes, is not a positive multiple of its {logical}-byte block", export.size)));
        }
        if export.max_payload() < logical {
            return Err(unusable(format!("its largest payload ({} bytes) is smaller than its block ({logical})", export.max_payload())));
        }
        let physical = export.preferred_block.filter(|p| *p >= logical && *p <= 64 << 10).unwrap_or(logical);
        let geometry = Geometry { logical_block_bytes: logical, physical_block_bytes: physical, capacity_bytes: export.size };
        Ok(NbdTarget {
            uri: uri.clone(),
            conn,
            export,
            geometry,
            depth: depth.max(1),
            writable,
            next_cookie: 1,
            pending: HashMap::new(),
            ops: 0,
            done: VecDeque::new(),
            rbuf: Vec::new(),
            gone: None,
            eio_run: 0,
            read_timeout: READ_TIMEOUT,
            read_data: HashMap::new(),
            lat: Default::default(),
        })
    }

    /// What the handshake learnt.
    pub fn export(&self) -> &Export {
        &self.export
    }

    /// Lines the opener shows the user: how the export makes writes durable.
    pub fn notes(&self) -> Vec<String> {
        let mut n = Vec::new();
        match (self.export.fua(), self.export.flush()) {
            (true, true) => {}
            (false, true) => n.push(format!(
                "{}: the export does not take FUA; each FUA write is sent as a write and a flush, and completes when both have",
                self.uri
            )),
            (_, false) => n.push(format!(
                "{}: the export takes no flush (no NBD_FLAG_SEND_FLUSH): no write can be made durable on demand, so flushes{} fail",
                self.uri,
                if self.export.fua() { "" } else { " and FUA writes" }
            )),
        }
        n
    }

    fn cookie(&mut self) -> u64 {
        let c = self.next_cookie;
        self.next_cookie += 1;
        c
    }

    fn failure(&self, errno: i32, what: String) -> IoFailure {
        IoFailure::new(errno, format!("{} {what}", self.uri))
    }

    /// Ends the connection: every request in flight fails with `f`, and every later one.
    fn end(&mut self, f: IoFailure) {
        if self.gone.is_none() {
            self.gone = Some(f);
        }
        let f = self.gone.clone().expect("set above");
        for (cookie, p) in std::mem::take(&mut self.pending) {
            match p {
                Pending::Write { token, buf, .. } | Pending::FuaFlush { token, buf, .. } => self.complete(token, Err(f.clone()), Some(buf)),
                Pending::Flush { token, .. } | Pending::Zero { token, .. } => self.complete(token, Err(f.clone()), None),
                Pending::Read { abandoned: false, .. } => {
                    self.read_data.insert(cookie, Err(f.clone()));
                }
                Pending::Read { .. } => {}
            }
        }
    }

    /// An operation the caller submitted ends.
    fn complete(&mut self, token: u64, result: Result<(), IoFailure>, buf: Option<AlignedBuf>) {
        self.ops -= 1;
        self.done.push_back(Completion::new(token, result, buf));
    }

    fn send(&mut self, head: &[u8], payload: &[u8]) -> Result<(), IoFailure> {
        let mut sent = 0;
        let total = head.len() + payload.len();
        while sent < total {
            let r = if sent < head.len() {
                self.conn.write_vectored(&[io::IoSlice::new(&head[sent..]), io::IoSlice::new(payload)])
            } else {
                self.conn.write(&payload[sent - head.len()..])
            };
            match r {
                Ok(0) => return Err(self.failure(libc::ESHUTDOWN, "the connection closed while a request was sent".into())),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let errno = if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                        libc::ETIMEDOUT
                    } else {
                        libc::ESHUTDOWN
                    };
                    return Err(self.failure(errno, format!("sending a request: {e} (the connection is closed)")));
                }
            }
        }
        Ok(())
    }

    /// Sends one request; a failure ends the connection (and fails `p` with everything else).
    fn request(&mut self, flags: u16, kind: u16, offset: u64, len: u32, payload: &[u8], p: Pending) -> Option<u64> {
        let cookie = self.cookie();
        let head = proto::request(flags, kind, cookie, offset, len);
        let sent = self.send(&head, payload);
        self.pending.insert(cookie, p);
        match sent {
            Ok(()) => Some(cookie),
            Err(f) => {
                self.end(f);
                None
            }
        }
    }

    fn note(&mut self, r: &Result<(), IoFailure>) {
        match r {
            Ok(()) => self.eio_run = 0,
            Err(f) if f.errno == libc::EIO => {
                self.eio_run += 1;
                if self.eio_run >= EIO_GONE_AFTER && self.gone.is_none() {
                    self.gone = Some(f.clone());
                }
            }
            Err(_) => {}
        }
    }

    /// Takes the whole reply at the front of what was read, if there is one (true), or ends
    /// the target on a reply that breaks the protocol (true: something changed).
    fn take_one(&mut self) -> bool {
        if self.rbuf.len() < 16 {
            return false;
        }
        match self.take_reply() {
            Ok(Some(())) => true,
            Ok(None) => false,
            Err(why) => {
                let f = self.failure(libc::EPROTO, format!("broke the NBD protocol: {why} (the connection is closed)"));
                self.end(f);
                true
            }
        }
    }

    /// Reads replies until one arrives (true) or `deadline` passes (false); a connection that
    /// ended or a reply that breaks the protocol ends the target (true: something changed).
    fn read_reply(&mut self, deadline: Instant) -> bool {
        loop {
            if self.take_one() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let _ = self.conn.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            let mut chunk = [0u8; 64 << 10];
            match self.conn.read(&mut chunk) {
                Ok(0) => {
                    let f = self.failure(libc::ESHUTDOWN, "the server closed the connection".into());
                    self.end(f);
                    return true;
                }
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => {}
                Err(e) => {
                    let f = self.failure(libc::ESHUTDOWN, format!("the connection failed: {e}"));
                    self.end(f);
                    return true;
                }
            }
        }
    }

    /// Takes one whole reply off the front of the buffer: `Ok(None)` when it is not all here.
    fn take_reply(&mut self) -> Result<Option<()>, BadReply> {
        let head = proto::reply_head(&self.rbuf)?;
        let data_len = match self.pending.get(&head.cookie) {
            None => return Err(BadReply::Cookie(head.cookie)),
            Some(Pending::Read { len, .. }) if head.error == 0 => *len,
            Some(_) => 0,
        };
        if self.rbuf.len() < 16 + data_len {
            return Ok(None);
        }
        let data: Vec<u8> = self.rbuf.drain(..16 + data_len).skip(16).collect();
        let p = self.pending.remove(&head.cookie).expect("looked up above");
        let result = match head.error {
            0 => Ok(()),
            e => Err(self.failure(e as i32, format!("{}: the server answered error {e}", describe(&p)))),
        };
        self.note(&result);
        match p {
            Pending::Write { token, buf, started, then_flush: true, .. } if result.is_ok() => {
                self.request(0, proto::CMD_FLUSH, 0, 0, &[], Pending::FuaFlush { token, started, buf });
            }
            Pending::Write { token, buf, fua, started, .. } => {
                self.lat[usize::from(fua)].record(started.elapsed().as_nanos() as u64);
                self.complete(token, result, Some(buf));
            }
            Pending::FuaFlush { token, started, buf } => {
                self.lat[1].record(started.elapsed().as_nanos() as u64);
                self.complete(token, result, Some(buf));
            }
            Pending::Flush { token, started } => {
                self.lat[2].record(started.elapsed().as_nanos() as u64);
                self.complete(token, result, None);
            }
            Pending::Zero { token, kind, started } => {
                self.lat[if kind == Zeroing::Deallocate { 4 } else { 5 }].record(started.elapsed().as_nanos() as u64);
                self.complete(token, result, None);
            }
            Pending::Read { abandoned: false, .. } => {
                self.read_data.insert(head.cookie, result.map(|()| data));
            }
            Pending::Read { .. } => {}
        }
        Ok(Some(()))
    }

    /// One read request of at most the largest payload, waited for.
    fn read_one(&mut self, offset: u64, buf: &mut [u8], deadline: Instant) -> Result<(), IoFailure> {
        let len = buf.len();
        let Some(cookie) = self.request(0, proto::CMD_READ, offset, len as u32, &[], Pending::Read { len, abandoned: false }) else {
            return Err(self.gone.clone().expect("a failed send ends the target"));
        };
        loop {
            if let Some(r) = self.read_data.remove(&cookie) {
                let data = r?;
                buf.copy_from_slice(&data);
                return Ok(());
            }
            if !self.read_reply(deadline) {
                if let Some(Pending::Read { abandoned, .. }) = self.pending.get_mut(&cookie) {
                    *abandoned = true;
                }
                return Err(
                    self.failure(libc::ETIMEDOUT, format!("read of {len} bytes at {offset}: no reply within {:?}", self.read_timeout))
                );
            }
        }
    }
}

fn describe(p: &Pending) -> &'static str {
    match p {
        Pending::Write { fua: true, .. } => "write (FUA)",
        Pending::Write { .. } => "write",
        Pending::FuaFlush { .. } => "flush after a FUA write",
        Pending::Flush { .. } => "flush",
        Pending::Zero { kind: Zeroing::Deallocate, .. } => "deallocate (NBD_CMD_TRIM)",
        Pending::Zero { kind: Zeroing::WriteZeroes, .. } => "write zeroes (NBD_CMD_WRITE_ZEROES)",
        Pending::Zero { kind: Zeroing::Format, .. } => "format",
        Pending::Read { .. } => "read",
    }
}

impl BlockTarget for NbdTarget {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn identity(&self) -> String {
        let desc = self.export.description.as_deref().filter(|d| !d.is_empty()).map_or(String::new(), |d| format!(" ({d})"));
        format!("NBD export {:?} at {}{desc}, {} bytes", self.uri.export, self.uri, self.export.size)
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if self.ops >= self.depth {
            return Err(TargetError::QueueFull { path: self.uri.text.clone(), depth: self.depth });
        }
        let started = Instant::now();
        match op {
            Op::Write { token, offset, buf, fua, .. } => {
                let len = buf.len() as u64;
                let lbs = u64::from(self.geometry.logical_block_bytes);
                let max = self.export.max_payload();
                let bad = if let Some(f) = &self.gone {
                    Some(f.clone())
                } else if !self.writable {
                    Some(self.failure(libc::EBADF, "write: the export was opened read-only".into()))
                } else if len == 0 || !offset.is_multiple_of(lbs) || !len.is_multiple_of(lbs) {
                    Some(self.failure(libc::EINVAL, format!("write of {len} bytes at {offset} is not aligned to the {lbs}-byte block")))
                } else if offset + len > self.export.size {
                    Some(self.failure(libc::EINVAL, format!("write of {len} bytes at {offset} passes the end ({})", self.export.size)))
                } else if len > u64::from(max) {
                    Some(self.failure(libc::EINVAL, format!("write of {len} bytes: the export takes at most {max} per request")))
                } else if fua && !self.export.fua() && !self.export.flush() {
                    Some(self.failure(libc::EOPNOTSUPP, "FUA write: the export takes neither FUA nor flush".into()))
                } else {
                    None
                };
                if let Some(f) = bad {
                    self.done.push_back(Completion::new(token, Err(f), Some(buf)));
                    return Ok(());
                }
                self.ops += 1;
                let native = fua && self.export.fua();
                let cookie = self.cookie();
                let head = proto::request(if native { proto::CMD_FLAG_FUA } else { 0 }, proto::CMD_WRITE, cookie, offset, len as u32);
                let sent = self.send(&head, &buf);
                self.pending.insert(cookie, Pending::Write { token, buf, fua, started, then_flush: fua && !native });
                if let Err(f) = sent {
                    self.end(f);
                }
            }
            Op::Flush { token } => {
                let bad = match &self.gone {
                    Some(f) => Some(f.clone()),
                    None if !self.export.flush() => {
                        Some(self.failure(libc::EOPNOTSUPP, "flush: the export takes no flush (no NBD_FLAG_SEND_FLUSH)".into()))
                    }
                    None => None,
                };
                if let Some(f) = bad {
                    self.done.push_back(Completion::new(token, Err(f), None));
                    return Ok(());
                }
                self.ops += 1;
                self.request(0, proto::CMD_FLUSH, 0, 0, &[], Pending::Flush { token, started });
            }
            Op::Zero { token, offset, len, kind, .. } => self.submit_zero(token, offset, len, kind, started),
        }
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        let deadline = Instant::now() + timeout;
        while self.done.len() < min && self.ops > 0 {
            if !self.read_reply(deadline) {
                break;
            }
        }
        // Every other reply already read completes now too (no system call for them).
        while self.ops > 0 && self.take_one() {}
        let n = self.done.len();
        out.extend(self.done.drain(..));
        Ok(n)
    }

    fn in_flight(&self) -> usize {
        self.ops + self.done.len()
    }

    fn zeroing(&self) -> ZeroingSupport {
        self.zeroing_carried()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        if let Some(f) = &self.gone {
            return Err(f.clone());
        }
        let len = buf.len() as u64;
        let lbs = u64::from(self.geometry.logical_block_bytes);
        if !offset.is_multiple_of(lbs) || !len.is_multiple_of(lbs) || offset + len > self.export.size {
            return Err(self.failure(libc::EINVAL, format!("read of {len} bytes at {offset}: not aligned to {lbs} bytes, or past the end")));
        }
        let started = Instant::now();
        let deadline = started + self.read_timeout;
        let max = self.export.max_payload() as usize / lbs as usize * lbs as usize;
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(max);
            self.read_one(offset + done as u64, &mut buf[done..done + n], deadline)?;
            done += n;
        }
        self.lat[3].record(started.elapsed().as_nanos() as u64);
        Ok(())
    }

    fn set_read_timeout(&mut self, timeout: Duration) {
        self.read_timeout = timeout;
    }

    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        LAT_NAMES.iter().zip(&self.lat).filter(|(_, h)| !h.is_empty()).map(|(n, h)| (*n, h.clone())).collect()
    }
}

impl Drop for NbdTarget {
    fn drop(&mut self) {
        // NBD_CMD_DISC, so the server ends the connection cleanly; nothing is waited for.
        if self.gone.is_none() {
            let _ = self.conn.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = self.conn.write_all(&proto::request(0, proto::CMD_DISC, 0, 0, 0));
        }
    }
}

#[cfg(test)]
mod tests;
