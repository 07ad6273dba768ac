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

/// Why a text is not an NBD URI this client reaches: the URI as given, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{uri}: {problem}")]
pub struct UriError {
    pub uri: String,
    pub problem: UriProblem,
}

/// What is wrong with an NBD URI (the part of [`UriError`] after the URI).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UriProblem {
    #[error("not an NBD URI (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)")]
    NotNbd,
    #[error("{0} asks for TLS, which faultline's NBD client does not speak (use nbd:// or nbd+unix://, on a network you trust)")]
    Tls(String),
    #[error("vsock transports are not supported (nbd:// or nbd+unix://)")]
    Vsock,
    #[error("unknown scheme {0:?} (nbd or nbd+unix)")]
    Scheme(String),
    #[error("an NBD URI has no fragment (#...)")]
    Fragment,
    /// A part (`export name`, `query`, `socket path`, `host`) is not UTF-8 once decoded.
    #[error("the {0} is not UTF-8 once percent-decoded")]
    NotUtf8(&'static str),
    #[error("the export name holds a NUL")]
    NulInExport,
    #[error("socket= belongs to nbd+unix:// URIs; nbd:// reaches HOST:PORT over TCP")]
    SocketOverTcp,
    #[error("{0}: TLS is not supported by faultline's NBD client")]
    TlsParameter(String),
    #[error("unknown query parameter {0:?} (nbd+unix:// takes socket=PATH, nbd:// none)")]
    Parameter(String),
    #[error("nbd+unix:// takes no host ({0:?}): nbd+unix:///EXPORT?socket=PATH")]
    UnixHost(String),
    #[error("nbd+unix:// needs socket=PATH (nbd+unix:///EXPORT?socket=PATH)")]
    NoSocket,
    #[error("socket= is empty")]
    EmptySocket,
    #[error("abstract Unix sockets are not supported")]
    AbstractSocket,
    #[error("user information is for TLS authentication, which faultline's NBD client does not speak")]
    UserInfo,
    #[error("an IPv6 address opened with [ and not closed")]
    OpenBracket,
    #[error("nbd:// needs a host (nbd://HOST[:PORT]/EXPORT)")]
    NoHost,
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("port 0")]
    PortZero,
}

fn decode(what: &'static str, s: &str) -> Result<String, UriProblem> {
    percent_decode_str(s).decode_utf8().map(|c| c.into_owned()).map_err(|_| UriProblem::NotUtf8(what))
}

impl NbdUri {
    pub fn parse(uri: &str) -> Result<NbdUri, UriError> {
        Self::parse_parts(uri).map_err(|problem| UriError { uri: uri.to_string(), problem })
    }

    fn parse_parts(uri: &str) -> Result<NbdUri, UriProblem> {
        use UriProblem as P;
        let (scheme, rest) = uri.split_once("://").ok_or(P::NotNbd)?;
        let unix = match scheme.to_ascii_lowercase().as_str() {
            "nbd" => false,
            "nbd+unix" => true,
            "nbds" | "nbds+unix" => return Err(P::Tls(scheme.to_string())),
            "nbd+vsock" | "nbds+vsock" => return Err(P::Vsock),
            other => return Err(P::Scheme(other.to_string())),
        };
        if rest.contains('#') {
            return Err(P::Fragment);
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let export = decode("export name", path.strip_prefix('/').unwrap_or(path))?;
        if export.contains('\0') {
            return Err(P::NulInExport);
        }
        let mut socket = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match decode("query", k)?.as_str() {
                "socket" if unix => socket = Some(decode("socket path", v)?),
                "socket" => return Err(P::SocketOverTcp),
                k if k.starts_with("tls-") => return Err(P::TlsParameter(k.to_string())),
                k => return Err(P::Parameter(k.to_string())),
            }
        }
        let endpoint = if unix {
            if !authority.is_empty() {
                return Err(P::UnixHost(authority.to_string()));
            }
            let socket = socket.ok_or(P::NoSocket)?;
            if socket.is_empty() {
                return Err(P::EmptySocket);
            }
            if socket.starts_with('\0') {
                return Err(P::AbstractSocket);
            }
            Endpoint::Unix(PathBuf::from(socket))
        } else {
            let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            if authority.contains('@') {
                return Err(P::UserInfo);
            }
            let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
                let (h, after) = v6.split_once(']').ok_or(P::OpenBracket)?;
                (h.to_string(), after.strip_prefix(':'))
            } else {
                match hostport.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (hostport.to_string(), None),
                }
            };
            let host = decode("host", &host)?;
            if host.is_empty() {
                return Err(P::NoHost);
            }
            let port = match port {
                None | Some("") => NBD_PORT,
                Some(p) => p.parse().map_err(|_| P::Port(p.to_string()))?,
            };
            if port == 0 {
                return Err(P::PortZero);
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
            assert_eq!(e.uri, uri);
            let text = e.to_string();
            assert!(text.contains(says) && text.starts_with(uri), "{uri}: {text}");
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
