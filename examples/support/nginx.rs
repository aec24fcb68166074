//! nginx as the load tools run it (`loadbench`'s anchors, `namesbench`'s
//! names phase): its stream module with `ssl_preread` and a `map` from the
//! preread server name to the upstream, one process without a master
//! (`master_process off`: the measured process is the one carrying the
//! connections and holding the map), `daemon off`, logs under a prefix of
//! its own. Included by each tool with `#[path]`; not an example of its own.
//!
//! Not here: starting, waiting for or stopping the process (each tool does
//! that with its own bounds), or anything that measures.

use std::path::Path;
use std::process::{Command, Stdio};

/// The stream module nginx loads: the path the binary's wrapper prints for
/// `--stream-module` (`.ci/install-trixie-tools`' `nginx-1.26`), or
/// Debian's own.
pub(crate) fn stream_module(bin: &Path) -> String {
    Command::new(bin)
        .arg("--stream-module")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| "/usr/lib/nginx/modules/ngx_stream_module.so".to_owned())
}

/// What differs between the tools' nginx configurations.
pub(crate) struct StreamConfig<'a> {
    /// The nginx binary (for its stream module's path).
    pub bin: &'a Path,
    /// The `-p` prefix: logs and the pid file go under it.
    pub prefix: &'a Path,
    pub port: u16,
    /// `worker_connections`: sockets, so a relayed connection counts
    /// twice (client and upstream); the descriptor limit is that and some.
    pub sockets: usize,
    /// Directives of the `stream` block before the map (hash sizes).
    pub stream_head: &'a str,
    /// The map's body: entries (or an `include`) and its `default`.
    pub map_body: &'a str,
}

impl StreamConfig<'_> {
    /// The whole nginx.conf.
    pub(crate) fn render(&self) -> String {
        format!(
            r#"load_module {module};
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile {files};
error_log {prefix}/logs/error.log error;
pid {prefix}/nginx.pid;
events {{ worker_connections {sockets}; }}
stream {{
{head}    map $ssl_preread_server_name $upstream {{
{map}    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        ssl_preread on;
        preread_timeout 5s;
        proxy_connect_timeout 5s;
        proxy_timeout 5m;
        proxy_pass $upstream;
    }}
}}
"#,
            module = stream_module(self.bin),
            files = self.sockets + 100,
            prefix = self.prefix.display(),
            sockets = self.sockets,
            head = self.stream_head,
            map = self.map_body,
            port = self.port,
        )
    }
}

/// Adds the arguments that run nginx on `config` under `prefix` (its error
/// log there from the first line, before the configuration names one) to
/// `command`, which starts the binary (directly or through `taskset`).
pub(crate) fn with_arguments<'c>(
    command: &'c mut Command,
    prefix: &Path,
    config: &Path,
) -> &'c mut Command {
    command
        .arg("-p")
        .arg(prefix)
        .arg("-e")
        .arg(prefix.join("logs/error.log"))
        .arg("-c")
        .arg(config)
}
