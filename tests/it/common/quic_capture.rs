// Shared by tests/it/quic_initial.rs, tests/it/quic_listener.rs and
// benches/quic_initial.rs: reading the captured QUIC first flights of
// tests/data/quic.

/// A capture of tests/data/quic: one datagram per line, hex.
pub(crate) fn capture(name: &str) -> Vec<Vec<u8>> {
    let path = format!("{}/tests/data/quic/{name}.hex", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|line| {
            (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}
