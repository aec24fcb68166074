//! The snirelay binary on the system allocator instead of mimalloc, for
//! heap profilers that hook `malloc` (heaptrack, valgrind's massif):
//! `heaptrack target/release/examples/sysalloc run --config FILE`.
//! benches/README.md ("Names") shows where the bytes of 100,000 names go
//! this way.
//!
//! Not for serving: the shipped binary's allocator is part of what the
//! benchmarks measure.

use std::process::ExitCode;

fn main() -> ExitCode {
    snirelay::cli::main()
}
