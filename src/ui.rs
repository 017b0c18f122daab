//! `cairn ui`: a web interface served by cairn itself, on the library's own API (nothing is
//! run through the binary). One process, one user, this machine.
//!
//! - [`repos`]: the repositories shown (each profile's, and `-r`), opened once when the ui
//!   starts (the passphrase never reaches the browser), locked for each request that reads.
//! - [`guard`]: who may ask: the token printed in the address, the `Host` and `Origin`
//!   headers (DNS rebinding, cross-site requests).
//! - [`browse`]: what reads: archives, an archive's tree (built once, served in pages), find,
//!   diff; [`download`]: a tar of a path.
//! - [`jobs`]: what runs long or writes: restore, back up now, check; one at a time, their
//!   `--log-json` records kept for the page to follow.
//! - [`tree`]: an archive's tree as the page lists it.
//! - [`server`]: the routes; [`assets`]: the page, built into the binary.

pub mod assets;
pub mod browse;
pub mod download;
pub mod guard;
pub mod jobs;
pub mod repos;
pub mod server;
pub mod tree;
