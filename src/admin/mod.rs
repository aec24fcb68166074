//! The admin listener (`[admin] listen`): `GET /metrics`, `/healthz`,
//! `/readyz`, `/config` (with `[admin] expose_config = true`) and the
//! status page `/`, plus the control endpoints, served with hyper
//! (HTTP/1.1), on TCP or a Unix socket. Loopback only unless
//! `admin.allow_public = true` (enforced in config). Any other path is
//! 404, or, with `[admin] forward_unmatched_to`, forwarded upstream.
//!
//! This file only declares the parts and re-exports what the rest of the
//! crate uses; each part is a file of its own:
//!
//! - the listener: [`server`] (the accept loop and a connection's life:
//!   a health probe cannot be starved), [`stream`] (the sockets, and the
//!   per-phase deadlines hyper's reads and writes run under), [`table`]
//!   (the open connections, their eviction order and close reasons),
//!   [`limits`] (its bounds), [`peer`] (who is on the other end);
//! - what it answers: [`router`] (the read-only endpoints, and which
//!   request goes where), [`response`] (the text and JSON answers),
//!   [`state`] (what the endpoints read: the configuration in force, the
//!   backends, the listeners' generations, [`Readiness`]), [`ready`]
//!   (`/readyz`'s verdict against `[admin] ready_requires`), [`status`]
//!   (the status page) with [`exposition`] (the `/metrics` text read
//!   back) and [`rates`] (its connection rates);
//! - control (issue 16): [`control`] (the endpoints and the way every
//!   control request goes), [`auth`] (who may control: a Unix socket
//!   caller, or a bearer token from `[admin] token_file` on TCP), [`call`]
//!   (what a handler is given, its refusals, the bounded body), and the
//!   endpoints: [`backends`], [`connections`], [`push`] (the pushed local
//!   names), [`sources`] (the per-source admission tables);
//! - [`forward`]: `[admin] forward_unmatched_to` (Gerbil's API behind the
//!   base address Pangolin posts to).
//!
//! Dependencies run one way: `server → {stream, table, router}`, `router →
//! {control, forward, status}`, `control → {auth, call, backends,
//! connections, push, sources}`, and all of them down to `state`,
//! `limits`, `peer` and `response`; no part uses this file.
//!
//! Not here: the metrics themselves ([`crate::metrics`]); what a state
//! means for the relay ([`crate::backend::plan`],
//! [`crate::backend::AddressState`]); the `[admin]` settings
//! ([`crate::config`]); the client side (`snirelay ctl`,
//! [`crate::cli`]).

pub(crate) mod auth;
pub(crate) mod backends;
pub(crate) mod call;
pub(crate) mod connections;
pub(crate) mod control;
pub(crate) mod exposition;
pub(crate) mod forward;
pub(crate) mod limits;
pub(crate) mod peer;
pub(crate) mod push;
pub(crate) mod rates;
pub(crate) mod ready;
pub(crate) mod response;
pub(crate) mod router;
pub(crate) mod server;
pub(crate) mod sources;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod table;

pub(crate) use limits::ADMIN_BACKLOG;
pub use limits::{FIRST_BYTE_TIMEOUT, KEEP_ALIVE_TIMEOUT, MAX_ADMIN_CONNECTIONS, REQUEST_TIMEOUT};
pub use peer::AdminPeer;
pub(crate) use server::serve;
pub use state::{AdminState, Readiness};
pub use stream::AdminSocket;
