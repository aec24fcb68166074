//! A reload as the server carries it out: the file read on its own thread
//! within `CONFIG_READ_TIMEOUT`, checked, compared with the running
//! snapshot ([`crate::run::reload`]'s diff), and applied, or refused with the
//! running snapshot kept (docs/design.md, "Generations"). The server's
//! loop and drain are in the parent module.

use super::*;

impl Server {
    /// Starts reading the file for a reload; the outcome arrives through
    /// the returned read (or at once, when it cannot even start).
    pub(super) fn start_reload(&mut self) -> Option<PendingRead> {
        self.notifier.reloading();
        let (tx, rx) = tokio::sync::oneshot::channel();
        match config::read_file(&self.config_path, move |read| {
            let _ = tx.send(read);
        }) {
            Ok(ticket) => Some(PendingRead {
                ticket: Some(ticket),
                result: rx,
                deadline: tokio::time::Instant::now() + config::CONFIG_READ_TIMEOUT,
                path: self.config_path.clone(),
            }),
            Err(error) => {
                self.reload(Err(error));
                None
            }
        }
    }

    /// Applies the outcome of a reload's read: a new configuration, or a
    /// logged and counted refusal that leaves everything as it was.
    pub(super) fn reload(&mut self, read: Result<String, ConfigError>) {
        let loaded = read.and_then(|text| Config::from_toml(&text, &self.config_path));
        match loaded
            .map_err(ReloadError::from)
            .and_then(|new| self.try_reload(new))
        {
            Ok(applied) => {
                self.reloads_applied += 1;
                // Counted before the admin listener shows the new
                // generation: its page never shows a generation whose
                // reload is not yet counted.
                metrics::metrics().reload("ok");
                // Applied, except what was fixed at start: said on every
                // reload while the file and the process disagree.
                let pending = effective::pending_restart(&self.started, &self.config.to_file());
                // The admin listener serves the new configuration before
                // the line says it is applied: whoever waits for the line
                // (a script, a test) then finds it in force there too.
                if let Some(admin) = &self.admin {
                    admin.set_config(Arc::new(self.config.clone()), pending.clone());
                    admin.set_backends(self.backends.clone());
                    admin.set_listeners(self.listeners.generations());
                }
                let d = &applied.diff;
                tracing::info!(
                    listeners.added = %d.listeners_added.join(","),
                    listeners.removed = %d.listeners_removed.join(","),
                    binds.added = applied.binds_added,
                    binds.removed = applied.binds_removed,
                    routes.added = d.routes_added.len(),
                    routes.removed = d.routes_removed.len(),
                    routes.changed = d.routes_changed.len(),
                    routes.list = %summary(d),
                    backends.added = %d.backends_added.join(","),
                    backends.removed = %d.backends_removed.join(","),
                    backends.changed = %d.backends_changed.join(","),
                    connections.drained = applied.marked,
                    drain_timeout = ?self.config.global.drain_timeout,
                    reloads.applied = self.reloads_applied,
                    reloads.failed = self.reloads_failed,
                    "reload applied"
                );
                log_trusted_names(&self.config);
                for p in &pending {
                    tracing::warn!(
                        key = p.key,
                        running = %p.running,
                        file = %p.file,
                        "needs a restart; the running value stays"
                    );
                }
                self.notifier.ready("serving; reload applied");
            }
            Err(error) => {
                self.reloads_failed += 1;
                metrics::metrics().reload("failed");
                tracing::error!(
                    error = %error,
                    reloads.applied = self.reloads_applied,
                    reloads.failed = self.reloads_failed,
                    "reload rejected; still serving the previous configuration"
                );
                self.notifier
                    .ready(&format!("serving; reload rejected: {error}"));
            }
        }
    }

    fn try_reload(&mut self, new: Config) -> Result<Applied, ReloadError> {
        let diff = reload::diff(&self.config, &new);
        // A source address this host lacks refuses the reload, as at start.
        crate::backend::egress::probe(&new)?;

        // Bind everything new first; dropping `opened` on error closes it all.
        let mut opened: BTreeMap<String, Sockets> = BTreeMap::new();
        for listener in &new.listeners {
            for addr in self.listeners.unbound(listener) {
                let socket = bind::bind(listener, addr)?;
                opened
                    .entry(listener.name.clone())
                    .or_default()
                    .push((BindKey::Config(addr), socket));
            }
        }

        // Commit: nothing below can fail the reload. Every listener gets one
        // new generation holding the new backends and pacing; the old
        // backends' runtimes stop only once no listener publishes them.
        let backends = Arc::new(Backends::start(&new.backends, Some(&self.backends)));
        let retired = std::mem::replace(&mut self.backends, backends);
        if new.global.max_connection_rate != self.config.global.max_connection_rate {
            self.pace = pace_for(&new);
        }
        let mut rebound = Vec::new();
        for listener in &new.listeners {
            let sockets = opened.remove(&listener.name).unwrap_or_default();
            rebound.push(
                self.listeners
                    .apply(listener, sockets, &self.backends, &self.pace),
            );
        }
        for name in &diff.listeners_removed {
            rebound.push(self.listeners.remove(name));
        }
        retired.retire(&self.backends);

        // Drain what the new generations do not carry on, once all of them
        // are published.
        let window = new.global.drain_timeout;
        let binds_added = rebound.iter().map(|r| r.added).sum();
        let binds_removed = rebound.iter().map(|r| r.removed).sum();
        let marked = rebound
            .iter()
            .flat_map(|r| &r.to_drain)
            .map(|signal| signal.fire(window))
            .sum();
        self.resize_permits(new.global.max_connections);
        self.config = new;
        Ok(Applied {
            diff,
            binds_added,
            binds_removed,
            marked,
        })
    }

    fn resize_permits(&self, wanted: usize) {
        let had = self.config.global.max_connections;
        if wanted > had {
            self.shared.permits.add_permits(wanted - had);
        } else if wanted < had {
            let missing = (had - wanted) - self.shared.permits.forget_permits(had - wanted);
            if missing > 0 {
                // Take the rest back as connections end.
                let permits = self.shared.permits.clone();
                tokio::spawn(async move {
                    if let Ok(p) = permits.acquire_many_owned(missing as u32).await {
                        p.forget();
                    }
                });
            }
        }
    }
}

/// A reload's read of the configuration file, running on its own thread.
pub(super) struct PendingRead {
    /// Taken when the read finishes or is given up on.
    ticket: Option<ReadTicket>,
    result: tokio::sync::oneshot::Receiver<Result<String, ConfigError>>,
    /// Set when the read starts, so polling again keeps the same bound.
    deadline: tokio::time::Instant,
    path: PathBuf,
}

impl PendingRead {
    /// The file's text, or why there is none: the read failed, or did not
    /// finish within [`config::CONFIG_READ_TIMEOUT`]. Cancel-safe: the
    /// server's loop polls it among other events.
    pub(super) async fn finish(&mut self) -> Result<String, ConfigError> {
        let outcome = tokio::time::timeout_at(self.deadline, &mut self.result).await;
        let ticket = self.ticket.take();
        match outcome {
            Ok(Ok(read)) => read,
            // The reading thread cannot drop its sender without sending.
            Ok(Err(_)) | Err(_) => {
                if let Some(ticket) = ticket {
                    ticket.abandon();
                }
                Err(ConfigError::ReadTimeout {
                    path: self.path.clone(),
                })
            }
        }
    }
}

/// The route identities that changed, for the reload log line (bounded).
fn summary(diff: &reload::Diff) -> String {
    const MAX: usize = 20;
    let all: Vec<String> = diff
        .routes_added
        .iter()
        .map(|r| format!("+{r}"))
        .chain(diff.routes_removed.iter().map(|r| format!("-{r}")))
        .chain(diff.routes_changed.iter().map(|r| format!("~{r}")))
        .collect();
    let mut text = all.iter().take(MAX).cloned().collect::<Vec<_>>().join(" ");
    if all.len() > MAX {
        text.push_str(&format!(" (+{} more)", all.len() - MAX));
    }
    text
}

/// Logs what each host name in a listener's `[listener.proxy_protocol]
/// trusted` resolved to when the configuration was loaded (at start and
/// at every reload): which addresses are trusted by name, until the next.
pub(super) fn log_trusted_names(config: &Config) {
    for listener in &config.listeners {
        let Some(inbound) = &listener.proxy_protocol else {
            continue;
        };
        for name in &inbound.trusted_names {
            let addresses: Vec<String> = name.addrs.iter().map(ToString::to_string).collect();
            tracing::info!(
                listener = %listener.name,
                name = %name.name,
                addresses = %addresses.join(","),
                "trusted host name resolved"
            );
        }
    }
}
