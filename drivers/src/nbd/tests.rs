//! The NBD client against a scripted server on one end of a socket pair.

use super::*;
use proto::*;

/// A scripted server on one end of a socket pair: the handshake offering `flags`, then
/// `serve` with the requests.
fn scripted(flags: u16, serve: impl FnOnce(&mut UnixStream) + Send + 'static) -> (NbdTarget, std::thread::JoinHandle<()>) {
    let (client, mut server) = UnixStream::pair().unwrap();
    let h = std::thread::spawn(move || {
        let mut hello = NBDMAGIC.to_be_bytes().to_vec();
        hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        server.write_all(&hello).unwrap();
        let mut b = [0u8; 4 + 16];
        server.read_exact(&mut b).unwrap();
        let mut opt = vec![0u8; u32::from_be_bytes(b[16..20].try_into().unwrap()) as usize];
        server.read_exact(&mut opt).unwrap();
        for (kind, data) in [
            (REP_INFO, [&INFO_EXPORT.to_be_bytes()[..], &(1u64 << 20).to_be_bytes(), &flags.to_be_bytes()].concat()),
            (REP_ACK, Vec::new()),
        ] {
            let mut r = REPLY_MAGIC.to_be_bytes().to_vec();
            r.extend_from_slice(&OPT_GO.to_be_bytes());
            r.extend_from_slice(&kind.to_be_bytes());
            r.extend_from_slice(&(data.len() as u32).to_be_bytes());
            r.extend_from_slice(&data);
            server.write_all(&r).unwrap();
        }
        serve(&mut server);
    });
    let uri = NbdUri::parse("nbd+unix:///x?socket=/scripted").unwrap();
    (NbdTarget::over(&uri, Conn::Unix(client), true, 8).unwrap(), h)
}

/// The next request: (flags, type, cookie, offset, length), a write's payload read and dropped.
fn request_of(s: &mut UnixStream) -> (u16, u16, u64, u64, u32) {
    let mut h = [0u8; 28];
    s.read_exact(&mut h).unwrap();
    let (flags, kind, cookie, offset, len) = (
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
        u64::from_be_bytes(h[16..24].try_into().unwrap()),
        u32::from_be_bytes(h[24..28].try_into().unwrap()),
    );
    if kind == CMD_WRITE {
        let mut p = vec![0u8; len as usize];
        s.read_exact(&mut p).unwrap();
    }
    (flags, kind, cookie, offset, len)
}

/// The next request: (flags, type, cookie), its payload read and dropped.
fn next(s: &mut UnixStream) -> (u16, u16, u64) {
    let (flags, kind, cookie, _, _) = request_of(s);
    (flags, kind, cookie)
}

/// A simple reply with `error` (the protocol's errno) to `cookie`.
fn reply(s: &mut UnixStream, cookie: u64, error: u32) {
    let mut r = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
    r.extend_from_slice(&error.to_be_bytes());
    r.extend_from_slice(&cookie.to_be_bytes());
    s.write_all(&r).unwrap();
}

fn ok(s: &mut UnixStream, cookie: u64) {
    let mut r = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
    r.extend_from_slice(&0u32.to_be_bytes());
    r.extend_from_slice(&cookie.to_be_bytes());
    s.write_all(&r).unwrap();
}

fn write(token: u64, fua: bool) -> Op {
    Op::Write { token, offset: 4096, buf: AlignedBuf::zeroed(4096), fua, write_id: token }
}

#[test]
fn a_fua_write_on_an_export_without_fua_completes_after_its_flush_which_goes_after_its_write_completed() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (mut t, h) = scripted(FLAG_HAS_FLAGS | FLAG_SEND_FLUSH, move |s| {
        let (flags, kind, cookie) = next(s);
        tx.send((flags, kind)).unwrap();
        // Nothing else may arrive before the write has completed.
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut probe = [0u8; 1];
        assert!(s.read(&mut probe).is_err(), "a request came before the write completed");
        s.set_read_timeout(None).unwrap();
        ok(s, cookie);
        let (flags, kind, cookie) = next(s);
        tx.send((flags, kind)).unwrap();
        ok(s, cookie);
    });
    assert!(t.notes()[0].contains("does not take FUA"), "{:?}", t.notes());
    t.submit(write(7, true)).unwrap();
    let mut out = Vec::new();
    t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].result.is_ok() && out[0].token == 7 && out[0].buf.is_some());
    assert_eq!(rx.recv().unwrap(), (0, CMD_WRITE), "sent without the FUA flag the export does not take");
    assert_eq!(rx.recv().unwrap(), (0, CMD_FLUSH));
    assert_eq!(t.in_flight(), 0);
    h.join().unwrap();
}

#[test]
fn a_connection_that_ends_fails_everything_in_flight_as_the_device_gone_and_hands_the_buffers_back() {
    let (mut t, h) = scripted(FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA, |s| {
        let (flags, kind, cookie) = next(s);
        assert_eq!((flags, kind), (CMD_FLAG_FUA, CMD_WRITE));
        ok(s, cookie);
        next(s);
        next(s);
        // Hangs up with two requests unanswered.
    });
    for token in 1..=3 {
        t.submit(write(token, token == 1)).unwrap();
    }
    let mut out = Vec::new();
    while out.len() < 3 {
        t.reap(&mut out, 3, Duration::from_secs(5)).unwrap();
    }
    h.join().unwrap();
    out.sort_by_key(|c| c.token);
    assert!(out[0].result.is_ok());
    for c in &out[1..] {
        let f = c.result.as_ref().unwrap_err();
        assert!(f.device_gone() && f.detail.contains("closed the connection"), "{f}");
        assert!(c.buf.is_some());
    }
    // Later ones fail at once; a read too.
    t.submit(write(4, false)).unwrap();
    t.reap(&mut out, 1, Duration::from_secs(1)).unwrap();
    assert!(out[3].result.as_ref().unwrap_err().device_gone());
    assert!(t.read_at(0, &mut [0u8; 512]).unwrap_err().device_gone());
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn a_reply_that_breaks_the_protocol_ends_the_connection_saying_what_was_wrong() {
    let (mut t, h) = scripted(FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA, |s| {
        let (_, _, cookie) = next(s);
        ok(s, cookie + 100);
    });
    t.submit(write(1, false)).unwrap();
    let mut out = Vec::new();
    t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
    h.join().unwrap();
    let f = out[0].result.as_ref().unwrap_err();
    assert!(f.errno == libc::EPROTO && f.detail.contains("no request in flight has"), "{f}");
}

/// Reaps until `n` completions are back, sorted by token.
fn reap_n(t: &mut NbdTarget, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    while out.len() < n {
        let more = n - out.len();
        assert!(t.reap(&mut out, more, Duration::from_secs(5)).unwrap() > 0, "no completion in 5 s");
    }
    out.sort_by_key(|c| c.token);
    out
}

#[test]
fn trim_and_write_zeroes_go_out_as_the_protocol_says_and_an_error_reply_fails_them() {
    let (tx, rx) = std::sync::mpsc::channel();
    let flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES;
    let (mut t, h) = scripted(flags, move |s| {
        let (trim, zeroes) = (request_of(s), request_of(s));
        tx.send((trim, zeroes)).unwrap();
        reply(s, trim.2, 0);
        reply(s, zeroes.2, EIO);
    });
    let z = t.zeroing();
    assert_eq!((z.deallocate, z.write_zeroes, z.dealloc_reads), (true, true, crate::block::DeallocReads::Unreported));
    t.submit(Op::Zero { token: 1, offset: 4096, len: 8192, kind: Zeroing::Deallocate, write_id: 1 }).unwrap();
    t.submit(Op::Zero { token: 2, offset: 16384, len: 4096, kind: Zeroing::WriteZeroes, write_id: 2 }).unwrap();
    let out = reap_n(&mut t, 2);
    h.join().unwrap();
    let (trim, zeroes) = rx.recv().unwrap();
    assert_eq!((trim.0, trim.1, trim.3, trim.4), (0, CMD_TRIM, 4096, 8192), "NBD_CMD_TRIM, no flags, no payload");
    assert_eq!((zeroes.0, zeroes.1, zeroes.3, zeroes.4), (CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 16384, 4096), "zeros written, no hole");
    assert!(out[0].result.is_ok() && out[0].buf.is_none(), "{:?}", out[0].result);
    let f = out[1].result.as_ref().unwrap_err();
    assert!(f.errno == libc::EIO && f.detail.contains("write zeroes (NBD_CMD_WRITE_ZEROES)") && f.detail.contains("error 5"), "{f}");
    let lat = t.latencies();
    assert!(["deallocate", "write_zeroes"].iter().all(|n| lat.iter().any(|(k, h)| k == n && h.count() == 1)), "{lat:?}");
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn zeroing_an_export_without_it_or_outside_it_is_refused_and_nothing_is_sent() {
    let (mut t, h) = scripted(FLAG_HAS_FLAGS | FLAG_SEND_FLUSH, |s| {
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut probe = [0u8; 1];
        assert!(s.read(&mut probe).is_err(), "a refused zeroing reached the server");
    });
    assert_eq!(t.zeroing(), ZeroingSupport { dealloc_reads: crate::block::DeallocReads::Unreported, ..Default::default() });
    let ops = [
        (0, 4096, Zeroing::Deallocate),
        (0, 4096, Zeroing::WriteZeroes),
        (100, 512, Zeroing::Deallocate),
        ((1 << 20) - 512, 1024, Zeroing::WriteZeroes),
    ];
    for (k, (offset, len, kind)) in ops.into_iter().enumerate() {
        t.submit(Op::Zero { token: k as u64, offset, len, kind, write_id: k as u64 }).unwrap();
    }
    let out = reap_n(&mut t, ops.len());
    let f = |i: usize| out[i].result.as_ref().unwrap_err().clone();
    assert!(f(0).errno == libc::EOPNOTSUPP && f(0).detail.contains("no NBD_FLAG_SEND_TRIM"), "{}", f(0));
    assert!(f(1).errno == libc::EOPNOTSUPP && f(1).detail.contains("no NBD_FLAG_SEND_WRITE_ZEROES"), "{}", f(1));
    assert!(f(2).errno == libc::EINVAL && f(2).detail.contains("deallocate of 512 bytes at 100"), "{}", f(2));
    assert!(f(3).errno == libc::EINVAL && f(3).detail.contains("passes the end"), "{}", f(3));
    h.join().unwrap();
}
