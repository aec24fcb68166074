//! Unit tests of the effective configuration: which keys read only at
//! start are pending after a reload, and how an address is written back.

use std::path::Path;

use serde_json::json;

use super::*;

fn config(head: &str) -> FileConfig {
    let text = format!(
        "{head}\n[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\
         [[route]]\nsni = [\"a.example\"]\nbackend = \"b\"\n\
         [backend.b]\naddresses = [\"127.0.0.1:9\"]\n"
    );
    Config::from_toml(&text, Path::new("t.toml"))
        .unwrap()
        .to_file()
}

#[test]
fn only_restart_keys_that_differ_are_pending() {
    let running = config("[global]\nthreads = 2\n[admin]\n");
    assert_eq!(pending_restart(&running, &running), []);
    // drain_timeout is applied by a reload: never pending.
    let file = config("[global]\nthreads = 3\ndrain_timeout = \"1s\"\n[admin]\n");
    assert_eq!(
        pending_restart(&running, &file),
        [PendingRestart {
            key: "global.threads",
            running: json!(2),
            file: json!(3),
        }]
    );
}

#[test]
fn a_changed_log_section_is_pending_key_by_key() {
    let running = config("[log]\ntarget = \"syslog\"\n");
    let file = config("[log]\ntarget = \"syslog\"\nfacility = \"daemon\"\n");
    assert_eq!(
        pending_restart(&running, &file),
        [PendingRestart {
            key: "log.facility",
            running: json!("local0"),
            file: json!("daemon"),
        }]
    );
    // No section is the defaults: nothing pending against a written-out one.
    let stderr = config("[log]\ntarget = \"stderr\"\nqueue = 4096\n");
    assert_eq!(pending_restart(&config(""), &stderr), []);
    assert_eq!(pending_restart(&stderr, &running)[0].key, "log.target");
}

#[test]
fn an_admin_section_added_or_removed_is_pending_as_admin_listen() {
    let with = config("[global]\nthreads = 2\n[admin]\n");
    let without = config("[global]\nthreads = 2\n");
    let listen = json!(crate::config::DEFAULT_ADMIN_LISTEN);
    assert_eq!(
        pending_restart(&with, &without),
        [PendingRestart {
            key: "admin.listen",
            running: listen.clone(),
            file: Value::Null,
        }]
    );
    assert_eq!(pending_restart(&without, &with)[0].running, Value::Null);
    assert_eq!(pending_restart(&without, &with)[0].file, listen);
}

#[test]
fn an_address_is_plain_unless_it_has_a_weight_a_cap_or_is_a_backup() {
    let text = "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\
         [[route]]\nsni = [\"a.example\"]\nbackend = \"b\"\n\
         [backend.b]\naddresses = [{ address = \"127.0.0.1:9\" }, \
         { address = \"127.0.0.1:10\", weight = 2 }, \
         { address = \"127.0.0.1:11\", max_connections = 7 }, \
         { address = \"127.0.0.1:12\", backup = true }]\n";
    let file = Config::from_toml(text, Path::new("t.toml"))
        .unwrap()
        .to_file();
    let shown = serde_json::to_value(&file.backends["b"].addresses).unwrap();
    assert_eq!(
        shown,
        json!([
            "127.0.0.1:9",
            {"address": "127.0.0.1:10", "weight": 2, "max_connections": null, "source": null, "backup": false},
            {"address": "127.0.0.1:11", "weight": 1, "max_connections": 7, "source": null, "backup": false},
            {"address": "127.0.0.1:12", "weight": 1, "max_connections": null, "source": null, "backup": true},
        ])
    );
    assert_eq!(file.backends["b"].backup_policy.as_deref(), Some("first"));
}
