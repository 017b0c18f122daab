//! Command-line syntax (clap derive). Parsing only; the commands live in [`crate::commands`].

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "cairn",
    version,
    about = "Deduplicating, compressing, encrypting backups",
    after_help = "Exit status: 0 success, 1 finished with warnings, 2 error.\n\
                  Environment: CAIRN_REPO (repository), CAIRN_PASSPHRASE or CAIRN_PASSCOMMAND (passphrase)."
)]
pub struct Cli {
    /// Repository: a directory path or file:///path
    #[arg(
        short = 'r',
        long = "repo",
        env = "CAIRN_REPO",
        global = true,
        value_name = "REPO"
    )]
    pub repo: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a new, empty repository
    Init(InitArgs),
    /// Show repository statistics
    Info(InfoArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EncryptionArg {
    /// AES-256-GCM; the key is stored in the repository, wrapped with your passphrase
    Repokey,
    /// No encryption (for tests and benchmarks only)
    None,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Encryption mode
    #[arg(long, short = 'e', value_enum, default_value = "repokey")]
    pub encryption: EncryptionArg,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}
