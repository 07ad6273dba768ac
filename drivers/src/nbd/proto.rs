//! The NBD wire format (the NetworkBlockDevice project's `doc/proto.md`): its constants, and
//! the client's side of the fixed newstyle handshake and of transmission (requests, simple
//! replies). Everything here works on `Read`/`Write` or on byte strings, so it is tested on
//! byte strings; faultline's own server (`faultline_fixtures::nbd`) uses the same constants.

use std::io::{self, Read, Write};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
/// What an oldstyle server sends where a newstyle one sends `IHAVEOPT`.
pub const CLISERV_MAGIC: u64 = 0x0000_4202_8186_1253;
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// Information types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands and command flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

// Error values (the protocol's, which are Linux's errno values).
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;

/// The largest option reply a client reads into memory: the protocol bounds names and
/// descriptions to 4 KiB, and this is four times that.
pub const MAX_OPTION_REPLY: u32 = 16 << 10;
/// Replies to one `NBD_OPT_GO` a client takes before it gives up on the server.
const MAX_GO_REPLIES: usize = 64;
/// The payload a server takes when it names no maximum: the protocol's 32 MiB.
pub const DEFAULT_MAX_PAYLOAD: u32 = 32 << 20;

/// What the handshake learnt about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub size: u64,
    pub flags: u16,
    /// The server's block sizes (`NBD_INFO_BLOCK_SIZE`), when it sent them.
    pub min_block: Option<u32>,
    pub preferred_block: Option<u32>,
    pub max_payload: Option<u32>,
    pub description: Option<String>,
    /// How transmission began: `NBD_OPT_GO`, or `NBD_OPT_EXPORT_NAME` from a server that does
    /// not know `NBD_OPT_GO`.
    pub via: &'static str,
}

impl Export {
    pub fn read_only(&self) -> bool {
        self.flags & FLAG_READ_ONLY != 0
    }
    pub fn flush(&self) -> bool {
        self.flags & FLAG_SEND_FLUSH != 0
    }
    pub fn fua(&self) -> bool {
        self.flags & FLAG_SEND_FUA != 0
    }
    /// `NBD_FLAG_SEND_TRIM`: the export takes `NBD_CMD_TRIM`.
    pub fn trim(&self) -> bool {
        self.flags & FLAG_SEND_TRIM != 0
    }
    /// `NBD_FLAG_SEND_WRITE_ZEROES`: the export takes `NBD_CMD_WRITE_ZEROES`.
    pub fn write_zeroes(&self) -> bool {
        self.flags & FLAG_SEND_WRITE_ZEROES != 0
    }
    /// The most bytes one request may carry.
    pub fn max_payload(&self) -> u32 {
        self.max_payload.unwrap_or(DEFAULT_MAX_PAYLOAD).max(512)
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("connection failed during the NBD handshake: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(String),
    /// The server refused the export (its error reply, with its message).
    #[error("the server refused export {name:?}: {what}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Refused { name: String, what: String, message: String },
}

fn protocol(why: impl Into<String>) -> HandshakeError {
    HandshakeError::Protocol(why.into())
}

fn read_n<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// The name of an option error reply.
fn rep_error_name(kind: u32) -> String {
    let known = match kind {
        REP_ERR_UNSUP => "NBD_REP_ERR_UNSUP (option not supported)",
        x if x == (1 << 31) + 2 => "NBD_REP_ERR_POLICY (forbidden by the server's policy)",
        REP_ERR_INVALID => "NBD_REP_ERR_INVALID",
        x if x == (1 << 31) + 4 => "NBD_REP_ERR_PLATFORM",
        x if x == (1 << 31) + 5 => "NBD_REP_ERR_TLS_REQD (the server requires TLS, which faultline does not speak)",
        REP_ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN (no such export)",
        x if x == (1 << 31) + 7 => "NBD_REP_ERR_SHUTDOWN (the server is shutting down)",
        x if x == (1 << 31) + 8 => "NBD_REP_ERR_BLOCK_SIZE_REQD",
        REP_ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG",
        _ => "",
    };
    if known.is_empty() {
        format!("error reply {kind:#x}")
    } else {
        known.to_string()
    }
}

/// The client's side of the fixed newstyle handshake for export `name`, up to transmission:
/// `NBD_OPT_GO` asking for the block sizes and the description, or `NBD_OPT_EXPORT_NAME` when
/// the server does not know `NBD_OPT_GO`. Nothing the server sends is read unbounded.
pub fn client_handshake(s: &mut (impl Read + Write), name: &str) -> Result<Export, HandshakeError> {
    let hello = read_n::<18>(s)?;
    if be64(&hello) != NBDMAGIC {
        return Err(protocol(format!("not an NBD server: it opened with {:02x?}, not \"NBDMAGIC\"", &hello[..8])));
    }
    match be64(&hello[8..]) {
        IHAVEOPT => {}
        CLISERV_MAGIC => return Err(protocol("an oldstyle NBD server (no export names, no options): faultline speaks newstyle only")),
        other => return Err(protocol(format!("after NBDMAGIC the server sent {other:#018x}, neither IHAVEOPT nor the oldstyle magic"))),
    }
    let server_flags = be16(&hello[16..]);
    if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(protocol(format!(
            "the server does not offer fixed newstyle negotiation (handshake flags {server_flags:#06x}), which faultline requires"
        )));
    }
    let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
    let client = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
    s.write_all(&client.to_be_bytes())?;
    if name.len() > 4096 {
        return Err(protocol(format!("export name of {} bytes: the protocol allows 4096", name.len())));
    }
    // NBD_OPT_GO: the name, then the information asked for.
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&2u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    data.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
    send_option(s, OPT_GO, &data)?;
    let mut ex =
        Export { size: 0, flags: 0, min_block: None, preferred_block: None, max_payload: None, description: None, via: "NBD_OPT_GO" };
    let mut have_export = false;
    for _ in 0..MAX_GO_REPLIES {
        let head = read_n::<20>(s)?;
        if be64(&head) != REPLY_MAGIC {
            return Err(protocol(format!("an option reply without the reply magic ({:#018x})", be64(&head))));
        }
        let (option, kind, len) = (be32(&head[8..]), be32(&head[12..]), be32(&head[16..]));
        if option != OPT_GO {
            return Err(protocol(format!("a reply to option {option} where the reply to NBD_OPT_GO (7) was due")));
        }
        if len > MAX_OPTION_REPLY {
            return Err(protocol(format!("an option reply of {len} bytes (at most {MAX_OPTION_REPLY} taken)")));
        }
        let mut body = vec![0u8; len as usize];
        s.read_exact(&mut body)?;
        match kind {
            REP_ACK => {
                if !have_export {
                    return Err(protocol("the server acknowledged NBD_OPT_GO without sending the export's size and flags"));
                }
                return Ok(ex);
            }
            REP_INFO => info(&mut ex, &body, &mut have_export)?,
            REP_ERR_UNSUP => return export_name(s, name, no_zeroes),
            k if k & (1 << 31) != 0 => {
                // Said goodbye, as the protocol asks of a client that gives up (best effort).
                let _ = send_option(s, OPT_ABORT, &[]);
                return Err(HandshakeError::Refused {
                    name: name.to_string(),
                    what: rep_error_name(k),
                    message: String::from_utf8_lossy(&body).into_owned(),
                });
            }
            // Replies a client does not know are ignored (the protocol says so).
            _ => {}
        }
    }
    Err(protocol(format!("more than {MAX_GO_REPLIES} replies to NBD_OPT_GO without its acknowledgement")))
}

fn send_option(s: &mut impl Write, option: u32, data: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(16 + data.len());
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b)?;
    s.flush()
}

/// One `NBD_REP_INFO`.
fn info(ex: &mut Export, body: &[u8], have_export: &mut bool) -> Result<(), HandshakeError> {
    let short = |what: &str, need: usize| protocol(format!("NBD_INFO_{what} of {} bytes, {need} expected", body.len()));
    if body.len() < 2 {
        return Err(short("(type)", 2));
    }
    match be16(body) {
        INFO_EXPORT => {
            if body.len() != 12 {
                return Err(short("EXPORT", 12));
            }
            (ex.size, ex.flags) = (be64(&body[2..]), be16(&body[10..]));
            *have_export = true;
        }
        INFO_BLOCK_SIZE => {
            if body.len() != 14 {
                return Err(short("BLOCK_SIZE", 14));
            }
            let (min, pref, max) = (be32(&body[2..]), be32(&body[6..]), be32(&body[10..]));
            if !min.is_power_of_two() || min > 64 << 10 || !pref.is_power_of_two() || pref < min || max < min {
                return Err(protocol(format!(
                    "block sizes that break the protocol's rules: minimum {min}, preferred {pref}, maximum payload {max}"
                )));
            }
            (ex.min_block, ex.preferred_block, ex.max_payload) = (Some(min), Some(pref), Some(max));
        }
        INFO_DESCRIPTION => ex.description = Some(String::from_utf8_lossy(&body[2..]).into_owned()),
        _ => {}
    }
    Ok(())
}

/// `NBD_OPT_EXPORT_NAME`, for a server without `NBD_OPT_GO`: its reply is the export's size
/// and flags (and 124 zero bytes unless both sides agreed to drop them), or a closed
/// connection for an export it does not have.
fn export_name(s: &mut (impl Read + Write), name: &str, no_zeroes: bool) -> Result<Export, HandshakeError> {
    send_option(s, OPT_EXPORT_NAME, name.as_bytes())?;
    let r = read_n::<10>(s).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => HandshakeError::Refused {
            name: name.into(),
            what: "the server closed the connection at NBD_OPT_EXPORT_NAME".into(),
            message: String::new(),
        },
        _ => e.into(),
    })?;
    if !no_zeroes {
        read_n::<124>(s)?;
    }
    Ok(Export {
        size: be64(&r),
        flags: be16(&r[8..]),
        min_block: None,
        preferred_block: None,
        max_payload: None,
        description: None,
        via: "NBD_OPT_EXPORT_NAME",
    })
}

/// A transmission request's 28-byte header.
pub fn request(flags: u16, kind: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset.to_be_bytes());
    b[24..28].copy_from_slice(&len.to_be_bytes());
    b
}

/// A simple reply's header, parsed: its error (0 for success) and cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHead {
    pub error: u32,
    pub cookie: u64,
}

/// A reply header that is not a simple reply's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("a structured reply, which faultline never negotiated")]
    Structured,
    #[error("a reply with magic {0:#010x}, not the simple reply's {SIMPLE_REPLY_MAGIC:#010x}")]
    Magic(u32),
}

/// Parses the simple reply header at the front of `b` (at least 16 bytes), refusing anything
/// else: faultline never asks for structured replies, so a server must not send them.
pub fn reply_head(b: &[u8]) -> Result<ReplyHead, ReplyError> {
    match be32(b) {
        SIMPLE_REPLY_MAGIC => Ok(ReplyHead { error: be32(&b[4..]), cookie: be64(&b[8..]) }),
        STRUCTURED_REPLY_MAGIC => Err(ReplyError::Structured),
        m => Err(ReplyError::Magic(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted server: what it sends, and what the client wrote to it.
    struct Script {
        from: io::Cursor<Vec<u8>>,
        to: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.from.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.to.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn hello(flags: u16) -> Vec<u8> {
        let mut b = NBDMAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b
    }

    fn reply(option: u32, kind: u32, data: &[u8]) -> Vec<u8> {
        let mut b = REPLY_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    fn info_export(size: u64, flags: u16) -> Vec<u8> {
        let mut d = INFO_EXPORT.to_be_bytes().to_vec();
        d.extend_from_slice(&size.to_be_bytes());
        d.extend_from_slice(&flags.to_be_bytes());
        reply(OPT_GO, REP_INFO, &d)
    }

    fn run(server: Vec<u8>, name: &str) -> (Result<Export, HandshakeError>, Vec<u8>) {
        let mut s = Script { from: io::Cursor::new(server), to: Vec::new() };
        let r = client_handshake(&mut s, name);
        (r, s.to)
    }

    #[test]
    fn go_with_block_sizes_and_description() {
        let mut srv = hello(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        srv.extend(info_export(1 << 20, FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA));
        let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [512u32, 4096, 1 << 20] {
            bs.extend_from_slice(&v.to_be_bytes());
        }
        srv.extend(reply(OPT_GO, REP_INFO, &bs));
        let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(b"a drive");
        srv.extend(reply(OPT_GO, REP_INFO, &d));
        srv.extend(reply(OPT_GO, 99, b"ignored"));
        srv.extend(reply(OPT_GO, REP_ACK, &[]));
        let (r, sent) = run(srv, "sim");
        let ex = r.unwrap();
        assert_eq!((ex.size, ex.min_block, ex.preferred_block, ex.max_payload), (1 << 20, Some(512), Some(4096), Some(1 << 20)));
        assert!(ex.flush() && ex.fua() && !ex.read_only());
        assert_eq!(ex.description.as_deref(), Some("a drive"));
        // Client flags, then NBD_OPT_GO naming "sim" and asking for two infos.
        assert_eq!(be32(&sent), FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        assert_eq!((be64(&sent[4..]), be32(&sent[12..]), be32(&sent[16..])), (IHAVEOPT, OPT_GO, 4 + 3 + 2 + 4));
        assert_eq!(&sent[20..27], &[0, 0, 0, 3, b's', b'i', b'm']);
        assert_eq!(&sent[27..], &[0, 2, 0, 3, 0, 2]);
    }

    #[test]
    fn refusals_name_what_the_server_said() {
        let mut srv = hello(FLAG_FIXED_NEWSTYLE);
        srv.extend(reply(OPT_GO, REP_ERR_UNKNOWN, b"no export 'x'"));
        let e = run(srv, "x").0.unwrap_err().to_string();
        assert!(e.contains("refused export \"x\"") && e.contains("NBD_REP_ERR_UNKNOWN") && e.contains("no export 'x'"), "{e}");
        let mut old = NBDMAGIC.to_be_bytes().to_vec();
        old.extend_from_slice(&CLISERV_MAGIC.to_be_bytes());
        old.extend_from_slice(&[0, 0]);
        assert!(run(old, "").0.unwrap_err().to_string().contains("oldstyle"));
        assert!(run(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n".to_vec(), "").0.unwrap_err().to_string().contains("not an NBD server"));
        assert!(run(hello(0), "").0.unwrap_err().to_string().contains("fixed newstyle"));
        let mut ack = hello(FLAG_FIXED_NEWSTYLE);
        ack.extend(reply(OPT_GO, REP_ACK, &[]));
        assert!(run(ack, "").0.unwrap_err().to_string().contains("without sending the export's size"));
        let mut big = hello(FLAG_FIXED_NEWSTYLE);
        big.extend(&reply(OPT_GO, REP_INFO, &[])[..16]);
        big.extend_from_slice(&(1u32 << 30).to_be_bytes());
        assert!(run(big, "").0.unwrap_err().to_string().contains("option reply of 1073741824 bytes"));
        let mut bad_bs = hello(FLAG_FIXED_NEWSTYLE);
        let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [3u32, 4096, 1 << 20] {
            bs.extend_from_slice(&v.to_be_bytes());
        }
        bad_bs.extend(reply(OPT_GO, REP_INFO, &bs));
        assert!(run(bad_bs, "").0.unwrap_err().to_string().contains("minimum 3"));
    }

    #[test]
    fn a_server_without_go_is_reached_through_export_name() {
        let mut srv = hello(FLAG_FIXED_NEWSTYLE);
        srv.extend(reply(OPT_GO, REP_ERR_UNSUP, &[]));
        srv.extend_from_slice(&(8u64 << 20).to_be_bytes());
        srv.extend_from_slice(&(FLAG_HAS_FLAGS | FLAG_READ_ONLY).to_be_bytes());
        srv.extend_from_slice(&[0u8; 124]);
        let ex = run(srv, "disk").0.unwrap();
        assert_eq!((ex.size, ex.via), (8 << 20, "NBD_OPT_EXPORT_NAME"));
        assert!(ex.read_only());
    }

    #[test]
    fn reply_heads() {
        let mut b = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&5u32.to_be_bytes());
        b.extend_from_slice(&77u64.to_be_bytes());
        assert_eq!(reply_head(&b), Ok(ReplyHead { error: 5, cookie: 77 }));
        b[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(reply_head(&b), Err(ReplyError::Structured));
        let r = request(CMD_FLAG_FUA, CMD_WRITE, 9, 4096, 512);
        assert_eq!(
            (be32(&r), be16(&r[4..]), be16(&r[6..]), be64(&r[8..]), be64(&r[16..]), be32(&r[24..])),
            (REQUEST_MAGIC, 1, 1, 9, 4096, 512)
        );
    }

    #[test]
    fn trim_and_write_zeroes_are_the_protocols_numbers() {
        assert_eq!((FLAG_SEND_TRIM, FLAG_SEND_WRITE_ZEROES, CMD_TRIM, CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE), (32, 64, 4, 6, 2));
        let ex = |flags| Export { size: 0, flags, min_block: None, preferred_block: None, max_payload: None, description: None, via: "" };
        assert!(ex(FLAG_HAS_FLAGS | FLAG_SEND_TRIM).trim() && !ex(FLAG_HAS_FLAGS | FLAG_SEND_TRIM).write_zeroes());
        assert!(ex(FLAG_SEND_WRITE_ZEROES).write_zeroes() && !ex(FLAG_SEND_WRITE_ZEROES).trim());
        let r = request(CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 3, 8192, 4096);
        assert_eq!((be16(&r[4..]), be16(&r[6..]), be64(&r[16..]), be32(&r[24..])), (2, 6, 8192, 4096));
    }

    proptest::proptest! {
        /// Whatever a server sends, the handshake ends (no panic, nothing unbounded).
        #[test]
        fn any_server_bytes(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..600), flags in 0u16..4) {
            let mut srv = hello(flags);
            srv.extend(tail);
            let _ = run(srv, "sim");
        }

        /// Whatever follows a good opening, the same.
        #[test]
        fn any_bytes_after_a_good_opening(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let mut srv = hello(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
            srv.extend(&reply(OPT_GO, REP_INFO, &[])[..8]);
            srv.extend(tail);
            let _ = run(srv, "sim");
        }

        #[test]
        fn any_reply_head(b in proptest::collection::vec(proptest::num::u8::ANY, 16..17)) {
            let _ = reply_head(&b);
        }
    }
}
