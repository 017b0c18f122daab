//! Signals, pauses and clients at once.

#[path = "../common/mod.rs"]
mod common;

mod cli_interrupt;
mod reliability_concurrency;
mod reliability_pauses;
mod replacing_pauses;
