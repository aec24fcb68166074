//! What each command's man page says beyond its options: exit status,
//! signals, files, environment, examples and related pages, as plain
//! tables. The pages (`packaging/snirelay*.1`) are generated from these
//! and from the clap definition in the parent module
//! (`cargo run --example manpage`), and a test holds the tables to the
//! code: every environment variable the binary reads is listed, every
//! signal and exit code of `run` is in docs/operations.md, "Exit codes and
//! signals", and every page a page names is shipped.
//!
//! Not here: rendering roff (the generator does), or the options (clap).

/// The extra sections of one command's page; each row is (term, meaning).
#[derive(Debug, Clone, Copy)]
pub struct Manual {
    /// EXIT STATUS: (code, when).
    pub exit_status: &'static [(&'static str, &'static str)],
    /// SIGNALS: (signal, what the process does); empty for commands that
    /// do not handle any.
    pub signals: &'static [(&'static str, &'static str)],
    /// FILES: (path, what it is).
    pub files: &'static [(&'static str, &'static str)],
    /// ENVIRONMENT: (variable, what it does).
    pub environment: &'static [(&'static str, &'static str)],
    /// EXAMPLES: (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
    /// SEE ALSO: pages as `name(section)`.
    pub see_also: &'static [&'static str],
}

/// A usage error, as clap exits on one.
const USAGE: (&str, &str) = (
    "2",
    "A command-line usage error (an unknown option, a missing argument).",
);

const RUN_EXIT: &[(&str, &str)] = &[
    (
        "0",
        "A clean stop: a drain on SIGTERM (also when drain_timeout ran out and the remaining \
         connections were closed), after handing the sockets to a new binary, or an immediate \
         stop on SIGINT or a second SIGTERM.",
    ),
    (
        "1",
        "The configuration is invalid, or the relay cannot start (a bind fails, an inherited \
         socket is unusable, the takeover handshake fails). A rejected reload never exits.",
    ),
    USAGE,
];

const RUN_SIGNALS: &[(&str, &str)] = &[
    (
        "SIGHUP",
        "Reload the configuration file. An invalid file is rejected and logged; the running \
         configuration stays.",
    ),
    (
        "SIGTERM",
        "Drain: close the listening sockets, let open connections finish for up to \
         [global] drain_timeout, close the rest and exit 0. Reloads are ignored while draining.",
    ),
    ("SIGTERM (second)", "Stop at once, while draining."),
    ("SIGINT", "Stop at once."),
];

const CONFIG_FILE: (&str, &str) = (
    "/etc/snirelay/snirelay.toml",
    "The configuration file read when --config is not given; see snirelay.toml(5).",
);

const RUN_FILES: &[(&str, &str)] = &[
    CONFIG_FILE,
    (
        "/usr/lib/systemd/system/snirelay.service",
        "The packaged unit: Type=notify, ExecReload sends SIGHUP, LimitNOFILE=1048576, and \
         run --takeover /run/snirelay/takeover.sock.",
    ),
    (
        "/usr/lib/systemd/system/snirelay-tls.socket, snirelay-h3.socket",
        "Optional socket activation for the listeners named tls and h3.",
    ),
    (
        "/run/snirelay/takeover.sock",
        "Where the packaged unit offers its listening sockets for a binary upgrade; see \
         snirelay-upgrade(8).",
    ),
    (
        "/var/lib/snirelay",
        "The unit's state directory, where [admin] local_names_file keeps pushed names.",
    ),
];

const RUN_ENVIRONMENT: &[(&str, &str)] = &[
    (
        "LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES",
        "Socket activation (systemd): sockets passed in serve the listener whose name equals \
         their FileDescriptorName.",
    ),
    (
        "NOTIFY_SOCKET",
        "sd_notify (systemd Type=notify): READY=1, RELOADING=1, STOPPING=1 and STATUS= are sent \
         there.",
    ),
    (
        "MIMALLOC_ALLOW_THP",
        "Set to anything but 0 to let the heap use transparent huge pages (off by default).",
    ),
];

const RUN_EXAMPLES: &[(&str, &str)] = &[
    (
        "snirelay run --config /etc/snirelay/snirelay.toml --log-format json",
        "Serve a configuration, logging JSON lines to stderr.",
    ),
    (
        "systemctl reload snirelay",
        "Reload the packaged service's configuration (SIGHUP).",
    ),
    (
        "prlimit --nofile=200000:200000 snirelay run --config snirelay.toml",
        "Start by hand with room for about 100,000 connections' descriptors.",
    ),
];

const SEE_ALSO: &[&str] = &[
    "snirelay(1)",
    "snirelay-run(1)",
    "snirelay-check(1)",
    "snirelay-probe(1)",
    "snirelay-certs(1)",
    "snirelay-ctl(1)",
    "snirelay-import-haproxy(1)",
    "snirelay.toml(5)",
    "snirelay-upgrade(8)",
];

/// The page of `snirelay` (without a subcommand it runs) and of `snirelay run`.
const RUN: Manual = Manual {
    exit_status: RUN_EXIT,
    signals: RUN_SIGNALS,
    files: RUN_FILES,
    environment: RUN_ENVIRONMENT,
    examples: RUN_EXAMPLES,
    see_also: SEE_ALSO,
};

const CHECK: Manual = Manual {
    exit_status: &[
        (
            "0",
            "The configuration is valid (warnings, such as a descriptor limit that cannot keep \
             max_connections or PROXY v2 headers toward a QUIC server that may not read them, go \
             to stderr and do not change it).",
        ),
        (
            "1",
            "The configuration is invalid; every problem found is printed.",
        ),
        USAGE,
    ],
    signals: &[],
    files: &[CONFIG_FILE],
    environment: &[(
        "MIMALLOC_ALLOW_THP",
        "As for run: set to anything but 0 to let the heap use transparent huge pages.",
    )],
    examples: &[
        (
            "snirelay check --config /etc/snirelay/snirelay.toml",
            "Validate a file before reloading it.",
        ),
        (
            "snirelay check --config new.toml && systemctl reload snirelay",
            "Reload only a file that passes.",
        ),
    ],
    see_also: SEE_ALSO,
};

const PROBE: Manual = Manual {
    exit_status: &[
        ("0", "Every address completed the TLS handshake."),
        ("1", "Some addresses did, some did not."),
        (
            "2",
            "None did, NAME does not resolve, --readyz did not answer 200, --textfile could not \
             be written, or a usage error.",
        ),
    ],
    signals: &[],
    files: &[(
        "/etc/ssl/certs",
        "The system's CA certificates, trusted unless --ca or --insecure is given.",
    )],
    environment: &[(
        "SSL_CERT_FILE, SSL_CERT_DIR",
        "Where the system's CA certificates are read from, when set.",
    )],
    examples: &[
        (
            "snirelay probe edge1.example.net --sni app.example.com",
            "Time connect and handshake to every address of edge1.example.net, for app.example.com.",
        ),
        (
            "snirelay probe 192.0.2.10 --sni app.example.com --readyz http://192.0.2.10:9901/readyz --json",
            "Also ask the edge's admin listener whether it is ready; print JSON.",
        ),
    ],
    see_also: SEE_ALSO,
};

const CERTS: Manual = Manual {
    exit_status: &[
        (
            "0",
            "Every name checked was covered by a certificate that verifies and has 14 days or \
             more left.",
        ),
        (
            "1",
            "Warnings only: a certificate has fewer than 14 days left, or a coalescing risk \
             under coalescing_risk = \"warn\" (the default).",
        ),
        (
            "2",
            "A name could not be checked at an address (no connection or handshake), a \
             certificate does not cover its name or does not verify, a coalescing risk under \
             coalescing_risk = \"error\", the configuration is invalid, no CA certificate \
             could be loaded, or a usage error.",
        ),
    ],
    signals: &[],
    files: &[
        CONFIG_FILE,
        (
            "/etc/ssl/certs",
            "The system's CA certificates, trusted unless --ca is given.",
        ),
    ],
    environment: &[(
        "SSL_CERT_FILE, SSL_CERT_DIR",
        "Where the system's CA certificates are read from, when set.",
    )],
    examples: &[
        (
            "snirelay certs --config /etc/snirelay/snirelay.toml",
            "A table of what every backend presents for every name routed to it.",
        ),
        (
            "snirelay certs --ca internal-ca.pem --format json --max-names 5",
            "Trust a private CA, check at most five names per backend, print JSON.",
        ),
    ],
    see_also: SEE_ALSO,
};

const CTL: Manual = Manual {
    exit_status: &[
        (
            "0",
            "The relay accepted the request (for status: the relay is ready).",
        ),
        (
            "1",
            "The relay refused it; its answer is printed (for status: not ready).",
        ),
        (
            "2",
            "The relay could not be asked (no [admin] section, no answer), or a usage error.",
        ),
    ],
    signals: &[],
    files: &[(
        "/etc/snirelay/snirelay.toml",
        "The configuration file whose [admin] listen and token_file say where and how to ask.",
    )],
    environment: &[],
    examples: &[
        (
            "snirelay ctl addresses",
            "Every backend address with its state.",
        ),
        (
            "snirelay ctl drain 10.0.0.5:443 --backend web",
            "Take an address out of new connections; open ones continue.",
        ),
        (
            "snirelay ctl connections --sni app.example.com",
            "The open connections for one name.",
        ),
        (
            "snirelay ctl sources --sort refused --limit 10",
            "The ten sources refused most.",
        ),
    ],
    see_also: SEE_ALSO,
};

const IMPORT_HAPROXY: Manual = Manual {
    exit_status: &[
        (
            "0",
            "Every line was translated (lines that need no key count as translated).",
        ),
        (
            "1",
            "Some lines were not translated; the TOML is still printed, and stderr lists them.",
        ),
        (
            "2",
            "FILE cannot be read, has no mode tcp frontend, or a usage error.",
        ),
    ],
    signals: &[],
    files: &[(
        "/etc/haproxy/haproxy.cfg",
        "Where HAProxy's configuration usually is; FILE names it.",
    )],
    environment: &[],
    examples: &[
        (
            "snirelay import-haproxy /etc/haproxy/haproxy.cfg > snirelay.toml",
            "Translate, then read every comment before using the result.",
        ),
        (
            "snirelay import-haproxy --check /etc/haproxy/haproxy.cfg",
            "Audit a migration: each deciding HAProxy line beside the key that decides the same.",
        ),
    ],
    see_also: SEE_ALSO,
};

/// The extra sections of `command`'s page (`snirelay` itself, or a
/// subcommand's name); `None` for a command without a page of its own.
pub fn manual(command: &str) -> Option<Manual> {
    Some(match command {
        "snirelay" | "run" => RUN,
        "check" => CHECK,
        "probe" => PROBE,
        "certs" => CERTS,
        "ctl" => CTL,
        "import-haproxy" => IMPORT_HAPROXY,
        _ => return None,
    })
}
