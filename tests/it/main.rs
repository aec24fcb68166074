//! The integration tests, linked once: one test binary (`it`) with a module
//! per area, instead of one binary per file, so a library change relinks one
//! executable rather than one per file. Each module keeps the name its file had
//! as a binary of its own, so `cargo test --test it relay::` runs what
//! `cargo test --test relay` ran.
//!
//! Most tests drive the relay as a real child process on loopback
//! (`common::Relay`); the rest call the library directly (parsers,
//! configuration) or read the repository's files (module graph, packaging,
//! README tables). `common/` is the one helper folder: the harness
//! (`common/mod.rs` and its submodules) and two fragments that examples and
//! benches `include!` as well (`common/man_pages.rs`,
//! `common/quic_capture.rs`).
//!
//! The tests share this process, so none may change process-wide state
//! another test sees: the environment, the working directory, the umask,
//! signal dispositions. Limits and signals are applied to the relay's
//! process (`prlimit`, `Relay::signal`), never to this one, with one
//! exception that only ever gives the others more room: the soft descriptor
//! limit is raised to the hard one, by the harness before the first relay
//! starts (the tests of all areas hold their sockets here at once) and by
//! `admin_control`. No test counts this process's descriptors or threads
//! (`leaks` counts the relay's). Tests run one per core, as they did within
//! each binary; what changes is that tests of different areas now run side
//! by side.

// The relay: relaying, hellos, timeouts, the hostile client.
mod client_hello;
mod client_hello_props;
mod client_hello_strict;
mod close_reasons;
mod fingerprint;
mod hostile;
mod keepalive;
mod leaks;
mod matcher;
mod metrics_catalog;
mod relay;
mod splice;
mod timeouts;

// Bandwidth limits.
mod bandwidth;

// Admission and limits.
mod admission;
mod admission_attempts;
mod admission_bounds;
mod limits_config;
mod limits_descriptors;
mod route_limits;
mod route_listeners;
mod route_rules;
mod sni_file;

// PROXY protocol.
mod proxy_config;
mod proxy_header;
mod proxy_interop;
mod proxy_protocol;
mod proxy_tlvs;
mod proxy_trusted_names;

// QUIC.
mod quic_backends;
mod quic_browser;
mod quic_initial;
mod quic_listener;
mod quic_proxy_in;
mod quic_proxy_out;
mod quic_quinn;
mod quic_refusal;
mod quic_two_relays;
mod quic_validation;

// Backends and clusters.
mod backend_backup;
mod backend_certs;
mod backend_cluster;
mod backend_dns;
mod backend_health;
mod backend_select;
mod cluster_flood;
mod coalescing_browser;
mod egress;
mod pangolin_base_address;
mod pangolin_ha_reference;
mod pangolin_local;
mod pangolin_lookup;
mod transparent;

// The admin listener and runtime control.
mod admin;
mod admin_connections;
mod admin_control;
mod admin_ready;
mod admin_sources;
mod admin_status;
mod probe;

// Life cycle: reload, stop, upgrade, systemd.
mod reload;
mod reload_generation;
mod reload_load;
mod stop;
mod systemd;
mod upgrade;
mod upgrade_load;

// HAProxy and snirelay side by side on the same traffic.
mod differential;
mod differential_case;
mod differential_limits;
mod differential_maps;
mod differential_rates;
mod differential_servers;
mod differential_timeouts;

// Log output: syslog through a real rsyslogd.
mod syslog;

// Configuration, import, packaging and the code's own structure.
mod config;
mod config_reference;
mod doc_examples;
mod doc_paths;
mod import_haproxy;
mod import_haproxy_keys;
mod man_pages;
mod module_graph;
mod packaging;

/// The harness shared by every module above (and by two benches).
mod common;
