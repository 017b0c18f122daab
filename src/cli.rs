//! The command line: the arguments ([`args`], clap), the `CAIRN_*` environment read once
//! ([`settings`]), profiles ([`profile`]), passphrases ([`passphrase`]) and the thin command
//! modules ([`commands`]) that call the engines and print their reports, with what they share
//! below them: rendering ([`output`]), output files ([`outfile`]) and path selection
//! ([`select`]). A command never imports another.

pub mod args;
pub mod commands;
pub mod hooks;
pub mod outfile;
pub mod output;
pub mod passphrase;
pub mod profile;
pub mod select;
pub mod settings;
pub mod summary;
