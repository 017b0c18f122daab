//! The command line, as users run it: backup, browse, ingest, repository commands, the shell, first hours, maintenance, copy, restoring over a target.

#[path = "../common/mod.rs"]
mod common;

mod cli_backup;
mod cli_browse;
mod cli_copy;
mod cli_exclude;
mod cli_first_hours;
mod cli_hooks;
mod cli_ingest;
mod cli_json_fields;
mod cli_log_json;
mod cli_maintenance;
mod cli_profile;
mod cli_repo;
mod cli_restore;
mod cli_rewrite;
mod cli_shell;
mod cli_ui;
