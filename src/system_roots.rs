//! The system's CA certificates as a rustls root store, for the TLS
//! clients snirelay runs itself (`probe`, and cluster lookups over https
//! without a `ca_file`).
//!
//! Not here: a configured CA file, client certificates, or building the
//! client configuration; each caller does those with its own errors.

use rustls::RootCertStore;

/// Adds the certificates of the system store (rustls-native-certs) to
/// `roots`; an error, with the first reason one could not be loaded, when
/// none could.
pub(crate) fn add_system_roots(roots: &mut RootCertStore) -> Result<(), String> {
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(found
            .errors
            .first()
            .map_or_else(|| "no certificates found".to_owned(), |e| e.to_string()));
    }
    Ok(())
}
