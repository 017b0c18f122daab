//! Long randomized runs (ignored by default; scripts/torture.sh runs them).

#[path = "../common/mod.rs"]
mod common;

mod torture;
mod torture_clients;
