//! A TCP connection's own stages (docs/design.md, "A connection's life"):
//! the accept loop, the connection read top to bottom in `connection`,
//! reading the ClientHello off the socket ([`inspect`]) and dialling the
//! backend (`dial`). The PROXY stages are in `proxy`, the byte pump in
//! `pump`, and what TCP shares with QUIC in `flow`.

pub(crate) mod accept_loop;
pub(crate) mod connection;
pub(crate) mod dial;
pub mod inspect;
pub(crate) mod refuse;
