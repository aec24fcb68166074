//! A TCP connection's own stages (docs/design.md, "A connection's life"):
//! the accept loop, the connection read top to bottom in `connection`,
//! reading the ClientHello off the socket ([`inspect`]) and dialling the
//! backend (`dial`). Not here: the PROXY stages (`proxy`), the byte pump
//! (`pump`), and what TCP shares with QUIC (`flow`: the gate, and the
//! decision after the hello carried out, [`crate::flow::carry_out`]).

pub(crate) mod accept_loop;
pub(crate) mod connection;
pub(crate) mod dial;
pub mod inspect;
pub(crate) mod refuse;
