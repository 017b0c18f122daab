//! Hostile local users, hostile hosts, client trust, keys and extract path safety.

#[path = "../common/mod.rs"]
mod common;

mod client_trust;
mod extract_safety;
mod hardening;
mod hostile_host;
mod reliability_keys;
mod restore_targets;
mod victim;
