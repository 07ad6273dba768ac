//! What the ring's completions mean: each harness operation's completion goes to `ready` with
//! its result, a read's result to its slot; and the run of failures that marks the device gone.

use super::*;

impl UringTarget {
    pub(super) fn note_result(&mut self, err: Option<&IoFailure>) {
        match err {
            None => self.eio_run = 0,
            Some(f) => {
                if f.errno == libc::EIO {
                    self.eio_run += 1;
                }
                if self.gone.is_none() && (f.device_gone() || self.eio_run >= EIO_GONE_AFTER) {
                    self.gone = Some(f.clone());
                }
            }
        }
    }

    /// Processes every available completion: harness operations go to `ready`, reads
    /// update their slots.
    pub(super) fn harvest(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        {
            let mut cq = self.ring.completion();
            cq.sync();
            for c in &mut cq {
                cqes.push((c.user_data(), c.result()));
            }
        }
        if cqes.is_empty() {
            self.cqes = cqes;
            return;
        }
        let now = Instant::now();
        for (ud, res) in cqes.drain(..) {
            let i = ud as usize;
            let Some(slot) = self.slots.get_mut(i) else { continue };
            let kind = std::mem::replace(&mut slot.kind, Kind::Free);
            let ns = now.duration_since(slot.at).as_nanos() as u64;
            self.kernel -= 1;
            match kind {
                Kind::Write { token, offset, len, fua } => {
                    self.lat[if fua { LAT_FUA } else { LAT_WRITE }].record(ns);
                    let buf = self.slots[i].buf.take();
                    self.free.push(i as u32);
                    let result = if res < 0 {
                        Err(self.failure(-res, format!("write of {len} bytes at {offset}{}", if fua { " (FUA)" } else { "" })))
                    } else if res as usize != len {
                        Err(self.failure(libc::EIO, format!("short write at {offset}: {res} of {len} bytes")))
                    } else {
                        Ok(())
                    };
                    self.note_result(result.as_ref().err());
                    self.ready.push_back(Completion { token, result, buf, at: now });
                }
                Kind::Flush { token } => {
                    self.lat[LAT_FLUSH].record(ns);
                    self.free.push(i as u32);
                    let result = if res < 0 { Err(self.failure(-res, "flush".into())) } else { Ok(()) };
                    self.note_result(result.as_ref().err());
                    self.ready.push_back(Completion { token, result, buf: None, at: now });
                }
                Kind::Zero(z) => {
                    self.free.push(i as u32);
                    self.zero_done(z, res, ns, now);
                }
                Kind::Read { .. } => {
                    self.lat[LAT_READ].record(ns);
                    self.slots[i].kind = Kind::Read { result: Some(res) };
                }
                Kind::AbandonedRead => {
                    if let Some(b) = self.slots[i].buf.take() {
                        self.read_bufs.push(b);
                    }
                    self.hung_reads -= 1;
                    self.free.push(i as u32);
                }
                Kind::Free => {}
            }
        }
        self.cqes = cqes;
    }

    pub(super) fn refuse(&mut self, token: u64, buf: Option<AlignedBuf>, failure: IoFailure) {
        self.user += 1;
        self.ready.push_back(Completion::new(token, Err(failure), buf));
    }
}
