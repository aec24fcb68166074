//! Checks `[admin]`: the admin listener's address (loopback unless
//! `allow_public`), its token file, pushed local names and forwarding.
//!
//! Not here: serving any of it (`admin`).

use super::*;

impl Checker {
    /// `routes`: the names of the file's routes (`ready_requires` may name them).
    pub(super) fn admin(
        &mut self,
        section: &AdminSection,
        routes: &HashSet<&str>,
    ) -> Option<Admin> {
        let text = section.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN);
        let allow_public = section.allow_public.unwrap_or(DEFAULT_ADMIN_ALLOW_PUBLIC);
        // Run-time control (issue 16): a Unix socket, and the token file.
        let token_file = match section.token_file.as_deref() {
            None => None,
            Some(path) => match read_tokens(&self.dir.join(path)) {
                Ok(tokens) => Some(tokens),
                Err(message) => {
                    self.problem("admin.token_file", message);
                    return None;
                }
            },
        };
        // Pushed local names (issue 17).
        let moved_close_window = self.duration(
            "admin.moved_close_window",
            &section.moved_close_window,
            DEFAULT_MOVED_CLOSE_WINDOW,
        );
        let local_names_file = match section.local_names_file.as_deref() {
            None => None,
            Some("") => {
                self.problem("admin.local_names_file", "\"\" names no file");
                return None;
            }
            Some(path) => Some(self.dir.join(path)),
        };
        // One base address for a Pangolin node (issue 30).
        let mut push_unauthenticated_from = Vec::new();
        for (i, cidr) in section
            .push_unauthenticated_from
            .iter()
            .flatten()
            .enumerate()
        {
            let key = format!("admin.push_unauthenticated_from[{i}]");
            match cidr.parse::<Cidr>() {
                Ok(net) if net.prefix() == 0 => self.problem(
                    key,
                    format!(
                        "{cidr:?} would take a push from anywhere without a token; \
                         list the control plane's addresses"
                    ),
                ),
                Ok(net) => push_unauthenticated_from.push(net),
                Err(e) => self.problem(key, format!("{cidr:?}: {e}")),
            }
        }
        let forward_unmatched_to = match section.forward_unmatched_to.as_deref() {
            None => None,
            Some(text) => match ForwardTo::parse(text) {
                Ok(to) => Some(to),
                Err(message) => {
                    self.problem("admin.forward_unmatched_to", message);
                    return None;
                }
            },
        };
        let mut ready_requires = Vec::new();
        for (i, text) in section.ready_requires.iter().flatten().enumerate() {
            let key = format!("admin.ready_requires[{i}]");
            match ReadyRequirement::parse(text) {
                Ok(ReadyRequirement::Backend(name)) if !self.declared_backends.contains(&name) => {
                    self.problem(key, format!("{text:?}: there is no [backend.{name}]"));
                }
                Ok(ReadyRequirement::Route(name)) if !routes.contains(name.as_str()) => {
                    self.problem(key, format!("{text:?}: no [[route]] is named {name:?}"));
                }
                Ok(requirement) if ready_requires.contains(&requirement) => {
                    self.problem(key, format!("{text:?} is listed twice"));
                }
                Ok(requirement) => ready_requires.push(requirement),
                Err(message) => self.problem(key, message),
            }
        }
        let listen = if let Some(path) = text.strip_prefix("unix:") {
            if !path.starts_with('/') {
                self.problem(
                    "admin.listen",
                    format!("{text:?}: a Unix socket path must be absolute (\"unix:/run/snirelay/admin.sock\")"),
                );
                return None;
            }
            if !push_unauthenticated_from.is_empty() {
                self.problem(
                    "admin.push_unauthenticated_from",
                    format!(
                        "{text:?} is a Unix socket: its callers have no source address, \
                         and whoever may open it may push already"
                    ),
                );
                return None;
            }
            AdminListen::Unix(PathBuf::from(path))
        } else {
            let listen = self.socket_addr("admin.listen", text)?;
            if !listen.ip().is_loopback() && !allow_public {
                self.problem(
                    "admin.listen",
                    format!(
                        "{text:?} is not a loopback address; the admin listener exposes \
                         metrics (and the configuration with expose_config), so set \
                         admin.allow_public = true to mean it"
                    ),
                );
                return None;
            }
            AdminListen::Tcp(listen)
        };
        Some(Admin {
            listen,
            allow_public,
            expose_config: section.expose_config.unwrap_or(DEFAULT_ADMIN_EXPOSE_CONFIG),
            address_labels: section
                .address_labels
                .unwrap_or(DEFAULT_ADMIN_ADDRESS_LABELS),
            token_file,
            local_names_file,
            moved_close_window: moved_close_window?,
            push_unauthenticated_from,
            forward_unmatched_to,
            ready_requires,
        })
    }
}
