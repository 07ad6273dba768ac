//! NBD URIs (the NetworkBlockDevice project's `doc/uri.md`): `nbd://HOST[:PORT]/EXPORT` over
//! TCP (port 10809 by default) and `nbd+unix:///EXPORT?socket=PATH` over a Unix socket. The
//! export name is the path less its leading `/`, percent-decoded. TLS (`nbds`, `nbds+unix`)
//! and vsock are refused, as are query parameters this client does not know (the
//! specification asks a parser to diagnose them).
//!
//! Parsed here by RFC 3986's generic syntax (scheme, authority, path, query) with the
//! `percent-encoding` crate decoding; the `url` crate would bring IDNA and Unicode tables for
//! host names an NBD URI names plainly.

use percent_encoding::percent_decode_str;
use std::fmt;
use std::path::PathBuf;

/// The IANA port of NBD.
pub const NBD_PORT: u16 = 10809;

/// Where an export is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

/// An export named by its URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub endpoint: Endpoint,
    pub export: String,
    /// The URI as given.
    pub text: String,
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `s` means to be an NBD URI (its scheme names NBD), right or wrong: a target given
/// so is parsed as one and refused with the reason if it is not a good one, never taken for a
/// file name.
pub fn looks_like_nbd(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| scheme.starts_with("nbd"))
}

fn decode(what: &str, s: &str, uri: &str) -> Result<String, String> {
    percent_decode_str(s).decode_utf8().map(|c| c.into_owned()).map_err(|_| format!("{uri}: the {what} is not UTF-8 once percent-decoded"))
}

impl NbdUri {
    pub fn parse(uri: &str) -> Result<NbdUri, String> {
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| format!("{uri}: not an NBD URI (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)"))?;
        let unix = match scheme.to_ascii_lowercase().as_str() {
            "nbd" => false,
            "nbd+unix" => true,
            "nbds" | "nbds+unix" => return Err(format!("{uri}: {scheme} asks for TLS, which faultline's NBD client does not speak (use nbd:// or nbd+unix://, on a network you trust)")),
            "nbd+vsock" | "nbds+vsock" => return Err(format!("{uri}: vsock transports are not supported (nbd:// or nbd+unix://)")),
            other => return Err(format!("{uri}: unknown scheme {other:?} (nbd or nbd+unix)")),
        };
        if rest.contains('#') {
            return Err(format!("{uri}: an NBD URI has no fragment (#...)"));
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let export = decode("export name", path.strip_prefix('/').unwrap_or(path), uri)?;
        if export.contains('\0') {
            return Err(format!("{uri}: the export name holds a NUL"));
        }
        let mut socket = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match decode("query", k, uri)?.as_str() {
                "socket" if unix => socket = Some(decode("socket path", v, uri)?),
                "socket" => return Err(format!("{uri}: socket= belongs to nbd+unix:// URIs; nbd:// reaches HOST:PORT over TCP")),
                k if k.starts_with("tls-") => return Err(format!("{uri}: {k}: TLS is not supported by faultline's NBD client")),
                k => return Err(format!("{uri}: unknown query parameter {k:?} (nbd+unix:// takes socket=PATH, nbd:// none)")),
            }
        }
        let endpoint = if unix {
            if !authority.is_empty() {
                return Err(format!("{uri}: nbd+unix:// takes no host ({authority:?}): nbd+unix:///EXPORT?socket=PATH"));
            }
            let socket = socket.ok_or_else(|| format!("{uri}: nbd+unix:// needs socket=PATH (nbd+unix:///EXPORT?socket=PATH)"))?;
            if socket.is_empty() {
                return Err(format!("{uri}: socket= is empty"));
            }
            if socket.starts_with('\0') {
                return Err(format!("{uri}: abstract Unix sockets are not supported"));
            }
            Endpoint::Unix(PathBuf::from(socket))
        } else {
            let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            if authority.contains('@') {
                return Err(format!("{uri}: user information is for TLS authentication, which faultline's NBD client does not speak"));
            }
            let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
                let (h, after) = v6.split_once(']').ok_or_else(|| format!("{uri}: an IPv6 address opened with [ and not closed"))?;
                (h.to_string(), after.strip_prefix(':'))
            } else {
                match hostport.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (hostport.to_string(), None),
                }
            };
            let host = decode("host", &host, uri)?;
            if host.is_empty() {
                return Err(format!("{uri}: nbd:// needs a host (nbd://HOST[:PORT]/EXPORT)"));
            }
            let port = match port {
                None | Some("") => NBD_PORT,
                Some(p) => p.parse().map_err(|_| format!("{uri}: port {p:?} is not a number from 1 to 65535"))?,
            };
            if port == 0 {
                return Err(format!("{uri}: port 0"));
            }
            Endpoint::Tcp { host, port }
        };
        Ok(NbdUri { endpoint, export, text: uri.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp { host: host.into(), port }
    }

    #[test]
    fn the_specifications_examples() {
        for (uri, export) in [
            ("nbd://example.com/disk", "disk"),
            ("nbd://example.com/", ""),
            ("nbd://example.com", ""),
            ("nbd://example.com//disk", "/disk"),
            ("nbd://example.com/hello%20world", "hello world"),
        ] {
            let u = NbdUri::parse(uri).unwrap();
            assert_eq!((u.endpoint, u.export.as_str()), (tcp("example.com", NBD_PORT), export), "{uri}");
        }
        let u = NbdUri::parse("nbd+unix:///disk?socket=sock").unwrap();
        assert_eq!((u.endpoint, u.export.as_str()), (Endpoint::Unix("sock".into()), "disk"));
        let u = NbdUri::parse("nbd://127.0.0.1:10900/sim").unwrap();
        assert_eq!(u.endpoint, tcp("127.0.0.1", 10900));
        let u = NbdUri::parse("nbd://[::1]:7/x").unwrap();
        assert_eq!(u.endpoint, tcp("::1", 7));
        let u = NbdUri::parse("nbd+unix:///?socket=/tmp/a%20b.sock").unwrap();
        assert_eq!((u.endpoint, u.export.as_str()), (Endpoint::Unix("/tmp/a b.sock".into()), ""));
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        for (uri, says) in [
            ("nbds://h/x", "TLS"),
            ("nbds+unix:///x?socket=s", "TLS"),
            ("nbd+vsock://3/x", "vsock"),
            ("nbd+unix:///x", "needs socket=PATH"),
            ("nbd+unix://host/x?socket=s", "takes no host"),
            ("nbd://h/x?socket=s", "belongs to nbd+unix"),
            ("nbd://h/x?tls-type=x509", "TLS"),
            ("nbd+unix:///x?socket=s&sockt=t", "unknown query parameter \"sockt\""),
            ("nbd://h:99999/x", "port \"99999\""),
            ("nbd://h:0/x", "port 0"),
            ("nbd:///x", "needs a host"),
            ("nbd://user@h/x", "user information"),
            ("nbd://[::1/x", "not closed"),
            ("nbd://h/x#frag", "fragment"),
            ("nbd://h/%ff", "not UTF-8"),
            ("nbd+unix:///x?socket=%00abs", "abstract"),
            ("nbdx://h/x", "unknown scheme"),
        ] {
            let e = NbdUri::parse(uri).unwrap_err();
            assert!(e.contains(says) && e.starts_with(uri), "{uri}: {e}");
        }
        assert!(looks_like_nbd("nbd+unix:///x") && looks_like_nbd("nbds://h") && !looks_like_nbd("/dev/nbd0") && !looks_like_nbd("nbd0"));
    }

    proptest::proptest! {
        #[test]
        fn any_text(s in "\\PC{0,80}") {
            let _ = NbdUri::parse(&s);
            let _ = NbdUri::parse(&format!("nbd://{s}"));
            let _ = NbdUri::parse(&format!("nbd+unix:///{s}"));
        }
    }
}
