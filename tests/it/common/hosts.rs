//! Names resolved from a test's own hosts file: a command runs in a mount
//! namespace of its own (`unshare --mount`) with the test's hosts file and
//! an nsswitch.conf saying `hosts: files` bind-mounted over /etc/hosts and
//! /etc/nsswitch.conf, so names resolve from that file alone, no DNS server
//! is asked and the host's files are untouched. Needs root and util-linux's
//! `unshare` and `mount`; a test that cannot set up fails loudly.
//!
//! Not here: a DNS server (see `dns`), or names for the test process itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A hosts file and a files-only nsswitch.conf for the relay's namespace.
pub(crate) struct Hosts {
    pub dir: PathBuf,
    hosts: PathBuf,
    nsswitch: PathBuf,
}

impl Hosts {
    pub(crate) fn new(text: &str) -> Hosts {
        let dir = super::scratch_dir("hosts");
        let hosts = dir.join("hosts");
        let nsswitch = dir.join("nsswitch.conf");
        std::fs::write(&hosts, text).unwrap();
        std::fs::write(&nsswitch, "hosts: files\n").unwrap();
        Hosts {
            dir,
            hosts,
            nsswitch,
        }
    }

    /// Rewrites the hosts file in place (the same inode: the bind mount
    /// shows the new text).
    pub(crate) fn set(&self, text: &str) {
        std::fs::write(&self.hosts, text).unwrap();
    }

    /// `command` run in a new mount namespace with the test files mounted
    /// over the system's; `exec`, so the relay keeps the spawned PID.
    pub(crate) fn wrap(&self, command: &Command) -> Command {
        let mut wrapped = Command::new("unshare");
        wrapped
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount --bind \"$1\" /etc/hosts && mount --bind \"$2\" /etc/nsswitch.conf \
                 && shift 2 && exec \"$@\"",
            )
            .arg("sh")
            .arg(&self.hosts)
            .arg(&self.nsswitch)
            .arg(command.get_program())
            .args(command.get_args());
        wrapped
    }

    /// `snirelay check --config path` in the namespace: exit code, stdout
    /// and stderr.
    pub(crate) fn check(&self, path: &Path) -> (Option<i32>, String, String) {
        let mut check = Command::new(env!("CARGO_BIN_EXE_snirelay"));
        check.arg("check").arg("--config").arg(path);
        let out = self.wrap(&check).output().expect("cannot run unshare");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
