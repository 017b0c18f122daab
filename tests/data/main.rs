//! Damage, adverse sources, full disks and whole-system fidelity.

#[path = "../common/mod.rs"]
mod common;

mod check_slices;
mod cli_whole_system;
mod reliability_damage;
mod reliability_diskfull;
mod reliability_source;
