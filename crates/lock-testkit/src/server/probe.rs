//! The readiness probe: `AUTH`, `PING` and `INFO server` in raw RESP over a plain socket (or a
//! TLS one, for a server on TLS only), so a starting server is checked without a client library
//! and recognised by its process id.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use super::options::ServerOptions;

/// `AUTH` (if needed), `PING` and `INFO server` (over TLS for a server with
/// `ServerOptions::tls`); returns the answering server's `process_id`.
pub(super) fn probe(port: u16, options: &ServerOptions) -> io::Result<Option<u32>> {
    let password = options.requirepass.as_deref();
    #[cfg(feature = "tls")]
    if let Some(tls) = &options.tls {
        let stream = crate::tls::probe_stream(connect(port)?, &tls.certs)?;
        return converse(BufReader::new(stream), password).map(|info| process_id(&info));
    }
    server_info(port, password).map(|info| process_id(&info))
}

/// The `process_id` of an `INFO server` text.
fn process_id(info: &str) -> Option<u32> {
    info.lines().find_map(|line| {
        line.strip_prefix("process_id:")
            .and_then(|pid| pid.trim().parse().ok())
    })
}

/// `AUTH` (if needed), `PING` and `INFO server` over a plain socket; returns the `INFO` text.
pub(super) fn server_info(port: u16, password: Option<&str>) -> io::Result<String> {
    converse(BufReader::new(connect(port)?), password)
}

/// A socket to the server on `port`, with short timeouts.
fn connect(port: u16) -> io::Result<TcpStream> {
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(250))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The probe's requests and answers on an open connection; returns the `INFO` text.
fn converse<S: Read + Write>(
    mut reader: BufReader<S>,
    password: Option<&str>,
) -> io::Result<String> {
    if let Some(password) = password {
        reader
            .get_mut()
            .write_all(&resp_command(&["AUTH", password]))?;
        expect_simple(&mut reader, "OK")?;
    }
    reader.get_mut().write_all(&resp_command(&["PING"]))?;
    expect_simple(&mut reader, "PONG")?;
    reader
        .get_mut()
        .write_all(&resp_command(&["INFO", "server"]))?;
    match read_reply(&mut reader)? {
        Reply::Bulk(info) => Ok(info),
        other => Err(unexpected(&other)),
    }
}

fn resp_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

enum Reply {
    Simple(String),
    Error(String),
    Bulk(String),
    Other(String),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Simple(s) => write!(f, "+{s}"),
            Self::Error(s) => write!(f, "-{s}"),
            Self::Bulk(s) => write!(f, "bulk string of {} bytes", s.len()),
            Self::Other(s) => write!(f, "{s}"),
        }
    }
}

fn unexpected(reply: &Reply) -> io::Error {
    io::Error::other(format!("unexpected reply {reply}"))
}

fn expect_simple(reader: &mut impl BufRead, expected: &str) -> io::Result<()> {
    match read_reply(reader)? {
        Reply::Simple(s) if s == expected => Ok(()),
        other => Err(unexpected(&other)),
    }
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| io::Error::other(format!("bad bulk length {rest:?}")))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Other("nil".to_owned()));
            };
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf)?;
            buf.truncate(len);
            Reply::Bulk(String::from_utf8_lossy(&buf).into_owned())
        }
        _ => Reply::Other(line.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_reply_parses_resp() {
        let mut input = &b"+PONG\r\n$5\r\nab\r\nc\r\n-ERR x\r\n$-1\r\n"[..];
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Simple(s) if s == "PONG"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Bulk(s) if s == "ab\r\nc"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Error(s) if s == "ERR x"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Other(s) if s == "nil"));
    }
}
