//! Cluster-resolved backends (`[backend.*.cluster]`): the node that holds a
//! site, looked up per SNI.
//!
//! Not here yet: the lookups and the cache (see the backend issue).

use std::net::IpAddr;

use super::AddressSet;
use crate::config::Cluster;

/// Where a cluster lookup sends a connection.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Another node (or several): connect there, with PROXY v2.
    Remote(AddressSet),
    /// This node holds the site: use `local_backend`.
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("the lookup found no node for this name")]
    NoAddress,
    #[error("the answer points outside allowed_targets")]
    TargetNotAllowed,
}

/// Per-SNI answers of one cluster backend.
#[derive(Debug)]
pub struct Cache {
    config: Cluster,
}

impl Cache {
    pub fn new(config: &Cluster) -> Cache {
        Cache {
            config: config.clone(),
        }
    }

    /// The answer for `sni`; `local` is the address the client dialled.
    pub async fn lookup(&self, sni: &str, local: IpAddr) -> Result<Answer, LookupError> {
        let _ = (sni, local, &self.config);
        Err(LookupError::NoAddress)
    }
}
