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
    /// Back up files and directories into a new archive
    Create(CreateArgs),
    /// Restore an archive (or parts of it)
    Extract(ExtractArgs),
    /// List archives, or the contents of one archive
    List(ListArgs),
    /// Show repository or archive statistics
    Info(InfoArgs),
    /// Show what changed between two archives
    Diff(DiffArgs),
}

/// `--progress` / `--no-progress`: forced on, forced off, or automatic (stderr is a terminal).
#[derive(Args, Debug, Default)]
pub struct ProgressArgs {
    /// Show progress on stderr (default: when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    /// Never show progress
    #[arg(long)]
    pub no_progress: bool,
}

impl ProgressArgs {
    pub fn choice(&self) -> Option<bool> {
        if self.no_progress {
            Some(false)
        } else if self.progress {
            Some(true)
        } else {
            None
        }
    }
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Exclude paths matching GLOB (repeatable). Without '/', it matches a name anywhere;
    /// with '/', the whole path ('*' stays within a component, '**' crosses them)
    #[arg(long = "exclude", value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Read exclude patterns from FILE, one per line ('#' starts a comment)
    #[arg(long = "exclude-from", value_name = "FILE")]
    pub exclude_from: Vec<std::path::PathBuf>,
    /// Exclude the contents of directories tagged with a CACHEDIR.TAG
    #[arg(long)]
    pub exclude_caches: bool,
    /// Stay on the file system of each PATH (do not descend into mount points)
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Print statistics when done
    #[arg(long, short = 's')]
    pub stats: bool,
    /// Print the result as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// A comment stored with the archive
    #[arg(long, default_value = "")]
    pub comment: String,
    #[command(flatten)]
    pub progress: ProgressArgs,
    /// Archive name (a series: the same name may be used for every backup)
    pub name: String,
    /// Files and directories to back up
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// Directory to restore into (created if missing; default: the current directory)
    #[arg(long, short = 't', value_name = "DIR")]
    pub target: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub progress: ProgressArgs,
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// Restore only these paths (as stored in the archive) and what is below them
    #[arg(value_name = "PATH")]
    pub paths: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// One JSON object per line
    #[arg(long)]
    pub json_lines: bool,
    /// Archive to list the contents of: NAME or aid:PREFIX (default: list archives)
    pub archive: Option<String>,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// One JSON object per line
    #[arg(long)]
    pub json_lines: bool,
    /// The older archive: NAME or aid:PREFIX
    pub archive1: String,
    /// The newer archive: NAME or aid:PREFIX
    pub archive2: String,
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
    /// Show this archive (NAME or aid:PREFIX) instead of the repository
    pub archive: Option<String>,
}
