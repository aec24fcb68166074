//! The client side of the control API, for `snirelay ctl`: one HTTP/1.1
//! request (`Connection: close`) to the admin listener named in the
//! configuration file, over TCP or its Unix socket, with the first token of
//! `[admin] token_file` when there is one. Blocking std sockets: the CLI
//! makes one request and exits.
//!
//! Not here: what the answers mean (the caller prints them).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::config::{Admin, AdminListen};

/// How long a request may take, connect included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read.
const MAX_ANSWER_BYTES: u64 = 16 * 1024 * 1024;

/// Sends `method path` (with a JSON `body`) to `admin`; returns the status
/// and the body.
pub(crate) fn request(
    admin: &Admin,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> io::Result<(u16, String)> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: snirelay\r\nConnection: close\r\n");
    if let Some(file) = &admin.token_file
        && let Some((_, token)) = file.tokens.first()
    {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(body);
    let raw = match &admin.listen {
        AdminListen::Tcp(addr) => {
            let mut s = TcpStream::connect_timeout(addr, TIMEOUT)?;
            s.set_read_timeout(Some(TIMEOUT))?;
            s.set_write_timeout(Some(TIMEOUT))?;
            exchange(&mut s, head.as_bytes())?
        }
        AdminListen::Unix(path) => {
            let mut s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(TIMEOUT))?;
            s.set_write_timeout(Some(TIMEOUT))?;
            exchange(&mut s, head.as_bytes())?
        }
    };
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad status line"))?;
    Ok((status, body.to_owned()))
}

fn exchange(s: &mut (impl Read + Write), request: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER_BYTES).read_to_end(&mut raw)?;
    Ok(raw)
}
