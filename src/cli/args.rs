//! Command-line syntax (clap derive). Parsing only; the commands live in [`crate::cli::commands`].

use clap::{Args, Parser, Subcommand, ValueEnum};

mod usage;
mod values;
pub use usage::{command_at, command_named, said_of, usage_error};
use values::{
    group_by, interval, listen, max_duration, percent, seconds, subset, threads, timestamp,
};
pub use values::{size_arg, GroupBy, GroupKey, MAX_THREADS};

/// The heading the options every command takes are listed under, after the command's own.
const GLOBAL: &str = "Global options";

/// `cairn --version`: the version and the commit it is built from (build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CAIRN_COMMIT"), ")");

#[derive(Parser, Debug)]
#[command(
    name = "cairn",
    version = VERSION,
    about = "Deduplicating, compressing, encrypting backups",
    after_help = "Exit status: 0 success, 1 finished with warnings, 2 error.\n\
                  Environment: CAIRN_REPO (repository), CAIRN_PASSPHRASE or CAIRN_PASSCOMMAND (passphrase);\n\
                  CAIRN_FROM_PASSPHRASE or CAIRN_FROM_PASSCOMMAND (the passphrase of copy --from-repo)."
)]
pub struct Cli {
    /// Repository: a directory path, file:///path, sftp://[user@]host[:port]/path,
    /// ssh://[user@]host[:port]/path (cairn serve on the server) or
    /// s3://host[:port]/bucket/prefix
    #[arg(
        short = 'r',
        long = "repo",
        env = "CAIRN_REPO",
        global = true, help_heading = GLOBAL,
        value_name = "REPO"
    )]
    pub repo: Option<String>,

    /// Wait up to SECONDS for a conflicting repository lock to be released
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "SECONDS", default_value_t = 1.0, value_parser = seconds, allow_negative_numbers = true)]
    pub lock_wait: f64,

    /// Read without taking a lock (list, info, diff, find, dump, export-tar, mount, extract,
    /// check, create --dry-run): for a repository that
    /// is still locked by a command that is gone, on media that cannot be written. A compact
    /// or prune running at the same time can make the command fail. (A repository that
    /// cannot be written is read without a lock anyway, with a warning.)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub bypass_lock: bool,

    /// Read defaults from a profile: NAME.toml under $XDG_CONFIG_HOME/cairn (~/.config/cairn),
    /// or a path (repository, passcommand, [create] paths and excludes, [prune] keep rules);
    /// the command line wins
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "NAME", env = "CAIRN_PROFILE")]
    pub profile: Option<String>,

    /// Show times in UTC instead of local time
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub utc: bool,

    /// Write progress, warnings, errors and a closing summary on stderr as JSON, one object
    /// per line (for programs; the fields are in docs/json.md)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub log_json: bool,

    /// Use an unencrypted repository this machine has never used (by default refused: its
    /// data is readable by whoever holds the storage)
    #[arg(
        long,
        global = true, help_heading = GLOBAL,
        env = "CAIRN_UNENCRYPTED_OK",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub allow_unencrypted: bool,

    /// Hold what is sent to the repository to KIB kibibytes a second (a lock's refresh is
    /// never held back)
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "KIB", env = "CAIRN_LIMIT_UPLOAD", value_parser = clap::value_parser!(u64).range(1..=u64::MAX / 1024))]
    pub limit_upload: Option<u64>,

    /// Hold what is read from the repository to KIB kibibytes a second
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "KIB", env = "CAIRN_LIMIT_DOWNLOAD", value_parser = clap::value_parser!(u64).range(1..=u64::MAX / 1024))]
    pub limit_download: Option<u64>,

    #[command(subcommand)]
    pub command: Command,
}

// One value per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
    /// Find files by name or path in every archive (or one)
    Find(FindArgs),
    /// Write one file of an archive to stdout; a directory as a tar stream
    Dump(DumpArgs),
    /// Write an archive (or parts of it) as a tar file, for tools that speak tar
    ExportTar(ExportTarArgs),
    /// Browse archives as a read-only file system (FUSE)
    Mount(MountArgs),
    /// Unmount what cairn mount mounted
    Umount(UmountArgs),
    /// Verify the repository (and with --repair, fix what can be fixed)
    Check(CheckArgs),
    /// Copy archives from another repository into this one (-r), re-encrypted under this
    /// one's keys; archives copied before are skipped, so an interrupted copy is resumed by
    /// running it again
    Copy(CopyArgs),
    /// Delete archives (their data stays until compact)
    Delete(DeleteArgs),
    /// Write archives again without what the patterns match (same name, time and host, a new
    /// id; the old archive is removed in the same commit). Run compact to free the space
    Rewrite(RewriteArgs),
    /// Give an archive another name (a new id; the old archive is removed in the same commit)
    Rename(RenameArgs),
    /// Set an archive's comment (a new id; the old archive is removed in the same commit)
    Comment(CommentArgs),
    /// Add or remove an archive's tags (a new id; the old archive is removed in the same
    /// commit)
    Tag(TagArgs),
    /// Delete archives that the keep rules do not keep. The rules apply to each archive name
    /// (each series) on its own: --keep-daily 7 keeps 7 days of "home" and 7 of "etc"
    Prune(PruneArgs),
    /// Free the space of data no archive uses any more
    Compact(CompactArgs),
    /// Manage the repository key
    #[command(subcommand)]
    Key(KeyCommand),
    /// Serve a repository on stdin and stdout, for clients of ssh://host/path repositories:
    /// meant as an SSH forced command in authorized_keys, e.g.
    /// command="cairn serve --restrict-to-path /srv/backup/laptop --append-only",restrict
    Serve(ServeArgs),
    /// Bring back archives that clients removed through an append-only server (see list
    /// --removed); run where the repository is, with direct access
    Undelete(UndeleteArgs),
    /// A web interface on this machine: the archives of your profiles' repositories (and -r)
    /// as a timeline, browse, find, diff, restore, back up now and check, in a browser. It
    /// listens on 127.0.0.1 and prints the address to open, with its access token
    Ui(UiArgs),
    /// Remove every lock of the repository, whoever holds it: only when you know that no
    /// cairn is using it (a lock left by a crashed client that cairn cannot judge abandoned)
    BreakLock,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(CompletionsArgs),
    /// Write man pages (cairn.1 and one per command) into DIR
    Man(ManArgs),
}

impl Command {
    /// The command's name, as typed (`export-tar`, `key`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Init(_) => "init",
            Command::Create(_) => "create",
            Command::Extract(_) => "extract",
            Command::List(_) => "list",
            Command::Info(_) => "info",
            Command::Diff(_) => "diff",
            Command::Find(_) => "find",
            Command::Dump(_) => "dump",
            Command::ExportTar(_) => "export-tar",
            Command::Mount(_) => "mount",
            Command::Umount(_) => "umount",
            Command::Check(_) => "check",
            Command::Copy(_) => "copy",
            Command::Delete(_) => "delete",
            Command::Rewrite(_) => "rewrite",
            Command::Rename(_) => "rename",
            Command::Comment(_) => "comment",
            Command::Tag(_) => "tag",
            Command::Prune(_) => "prune",
            Command::Compact(_) => "compact",
            Command::Key(_) => "key",
            Command::Serve(_) => "serve",
            Command::Undelete(_) => "undelete",
            Command::Ui(_) => "ui",
            Command::BreakLock => "break-lock",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
        }
    }
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing)
    #[arg(value_name = "DIR")]
    pub dir: std::path::PathBuf,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Also read every pack whole, decrypt and authenticate every chunk and recompute its id
    #[arg(long)]
    pub verify_data: bool,
    /// Rebuild the index from the packs, salvage what can be salvaged, and mark damaged files
    #[arg(long)]
    pub repair: bool,
    /// Without the key: check that every object's contents match its name (sha256) and the
    /// framing that is in clear (for the host of a repository, e.g. from a cron job)
    #[arg(long, conflicts_with_all = ["verify_data", "repair"])]
    pub repository_only: bool,
    /// Verify a slice of the packs (implies --verify-data): N/M, the N-th of M fixed parts
    /// (1/7 to 7/7 on seven nights cover every pack); P% or a SIZE (10%, 500G): that much,
    /// the packs this client verified longest ago first
    #[arg(long, value_name = "SLICE", value_parser = subset, conflicts_with_all = ["repair", "repository_only"])]
    pub subset: Option<crate::ops::check::slice::Subset>,
    /// Start reading no pack whole after this long (implies --verify-data): seconds, or 30m,
    /// 2h; the next run goes on with the packs verified longest ago
    #[arg(long, value_name = "TIME", value_parser = max_duration, conflicts_with_all = ["repair", "repository_only"])]
    pub max_duration: Option<std::time::Duration>,
    /// Check only this archive (NAME: the newest of that name, or aid:PREFIX; may be given
    /// more than once): its items, and only the packs it needs (read whole with
    /// --verify-data: does it restore?)
    #[arg(long, short = 'a', value_name = "ARCHIVE", conflicts_with_all = ["repair", "repository_only", "subset"])]
    pub archive: Vec<String>,
    /// Check only the archives whose names match GLOB (`*`, `?`, `[…]`), as -a does
    #[arg(long, value_name = "GLOB", conflicts_with_all = ["repair", "repository_only", "subset"])]
    pub glob: Option<String>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    /// Packs read and verified at once (default: CAIRN_THREADS, or the number of cores and at
    /// least 8 on a remote store)
    #[arg(long, value_name = "N", value_parser = threads, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args, Debug)]
pub struct CopyArgs {
    /// The repository to copy from (its passphrase from CAIRN_FROM_PASSPHRASE,
    /// CAIRN_FROM_PASSCOMMAND or a prompt)
    #[arg(long, value_name = "REPO")]
    pub from_repo: String,
    /// Archives to copy: NAME (every archive of that name) or aid:PREFIX; all when none given
    #[arg(value_name = "ARCHIVE")]
    pub archives: Vec<String>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["archives", "glob", "all"])))]
pub struct DeleteArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Show what would be deleted, delete nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Also every archive whose name matches GLOB (`*`, `?`, `[…]`; every archive of each
    /// name, not only the newest); asks for confirmation
    #[arg(long, value_name = "GLOB")]
    pub glob: Option<String>,
    /// Every archive of the repository; asks for confirmation
    #[arg(long, conflicts_with_all = ["archives", "glob"])]
    pub all: bool,
    /// Do not ask before deleting the archives --glob or --all chose (needed when no
    /// terminal can be asked)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Archives: NAME (the newest of that name) or aid:PREFIX
    #[arg(value_name = "ARCHIVE")]
    pub archives: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RewriteArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Leave out items matching GLOB and everything below them (the rules of create
    /// --exclude: without '/', a name anywhere; with '/', the whole stored path); repeatable
    #[arg(long = "exclude", value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Read such patterns from FILE, one per line ('#' starts a comment)
    #[arg(long = "exclude-from", value_name = "FILE")]
    pub exclude_from: Vec<std::path::PathBuf>,
    /// Set the comment of the archives written again
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Say what would be removed, write nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// With --dry-run: name every item that would be removed
    #[arg(long, requires = "dry_run")]
    pub list: bool,
    /// Also every archive whose name matches GLOB (`*`, `?`, `[…]`)
    #[arg(long, value_name = "GLOB")]
    pub glob: Option<String>,
    /// Archives: NAME (every archive of that name) or aid:PREFIX
    #[arg(required_unless_present = "glob", value_name = "ARCHIVE")]
    pub archives: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RenameArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// The new name
    pub new_name: String,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["add", "remove", "set"])))]
pub struct TagArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Add these tags (TAG,TAG; repeatable)
    #[arg(long, value_name = "TAG")]
    pub add: Vec<String>,
    /// Remove these tags (TAG,TAG; repeatable)
    #[arg(long, value_name = "TAG")]
    pub remove: Vec<String>,
    /// Replace the tags with these (TAG,TAG; "" for none)
    #[arg(long, value_name = "TAGS", conflicts_with_all = ["add", "remove"])]
    pub set: Option<String>,
    /// Archives: NAME (the newest archive of that name) or aid:PREFIX
    #[arg(required = true, value_name = "ARCHIVE")]
    pub archives: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CommentArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// The new comment (empty to remove it)
    pub text: String,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Keep the last N archives (one per second, as borg's --keep-last)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_last: u32,
    /// Keep every archive newer than DURATION (e.g. 7d; units S M H d w m y)
    #[arg(long, value_name = "DURATION", value_parser = interval)]
    pub keep_within: Option<String>,
    /// Keep the newest archive of each of the last N minutes that have one
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_minutely: u32,
    /// … of each of the last N hours
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_hourly: u32,
    /// … of each of the last N days
    #[arg(
        long,
        short = 'd',
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_daily: u32,
    /// … of each of the last N ISO weeks
    #[arg(
        long,
        short = 'w',
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_weekly: u32,
    /// … of each of the last N months
    #[arg(
        long,
        short = 'm',
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_monthly: u32,
    /// … of each of the last N years
    #[arg(
        long,
        short = 'y',
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep_yearly: u32,
    /// What makes a series, each kept by the rules on its own: a comma-separated list of
    /// name, host, user and tags (restic's forget --group-by)
    #[arg(long, value_name = "KEYS", default_value = "name", value_parser = group_by)]
    pub group_by: GroupBy,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only consider archives whose name matches this glob
    #[arg(long, value_name = "PATTERN")]
    pub glob: Option<String>,
    /// Show what would be deleted, delete nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// List every archive with the rule that keeps it (or "prune")
    #[arg(long)]
    pub list: bool,
}

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// Print what was done as one JSON object on standard output (fields: docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// Rewrite packs whose unused share is at least PERCENT (0: every pack that holds
    /// anything unused)
    #[arg(long, value_name = "PERCENT", default_value_t = 10.0, value_parser = percent, allow_negative_numbers = true)]
    pub threshold: f64,
    /// Show what would be done, change nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Remove for good the archives clients removed through an append-only server at least
    /// this long ago (7d, 12w; 1S for all), and free their data; by default they are kept
    #[arg(long, value_name = "INTERVAL")]
    pub removed_older_than: Option<String>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Serve only repositories at or below DIR (repeatable)
    #[arg(long, value_name = "DIR")]
    pub restrict_to_path: Vec<std::path::PathBuf>,
    /// Serve only the repository DIR (repeatable)
    #[arg(long, value_name = "DIR")]
    pub restrict_to_repository: Vec<std::path::PathBuf>,
    /// Keep history whatever the client asks: nothing but locks is deleted or replaced; an
    /// archive a client deletes is recorded as removed and hidden from it (cairn list
    /// --removed and cairn undelete, run on the server, show and bring it back)
    #[arg(long)]
    pub append_only: bool,
    /// Refuse writes that would take the repository over SIZE (500G, 2T)
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub storage_quota: Option<u64>,
}

#[derive(Args, Debug)]
pub struct UiArgs {
    /// Where to listen: ADDRESS:PORT, localhost:PORT or a port. A loopback address
    /// (127.0.0.1, [::1]) unless you mean every machine that reaches this one to reach it.
    /// The port is a free one the system picks unless given: a port known in advance is one
    /// another user of this machine can hold first, for a page of theirs to take its place
    #[arg(long, value_name = "ADDRESS:PORT", default_value = "127.0.0.1:0", value_parser = listen)]
    pub listen: std::net::SocketAddr,
    /// Open the page in the desktop's browser (through a file only you can read, so that the
    /// token does not show in the process list)
    #[arg(long)]
    pub open: bool,
}

#[derive(Args, Debug)]
pub struct UndeleteArgs {
    /// Archives to bring back: NAME (every removed archive of that name) or aid:PREFIX
    #[arg(value_name = "ARCHIVE", required_unless_present = "all")]
    pub archives: Vec<String>,
    /// Bring back every archive removed through an append-only server
    #[arg(long, conflicts_with = "archives")]
    pub all: bool,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Change the passphrase (the old one from CAIRN_PASSPHRASE or a prompt, the new one from
    /// CAIRN_NEW_PASSPHRASE or a prompt). The master key stays the same: an old key file that
    /// someone kept opens the repository, and later backups, with the old passphrase. To
    /// retire a master key, make a new repository and cairn copy into it
    ChangePassphrase,
    /// Write the key file to FILE (or stdout), for a copy kept apart from the repository: it
    /// is still protected by the passphrase, and the data cannot be read without both
    Export(KeyExportArgs),
    /// Put an exported key back into the repository (when its key file was lost or damaged);
    /// the key must be this repository's and open with the passphrase
    Import(KeyImportArgs),
    /// Add a passphrase: another key file that opens the repository (the current passphrase
    /// from CAIRN_PASSPHRASE or a prompt, the new one from CAIRN_NEW_PASSPHRASE or a prompt);
    /// at most 8
    Add,
    /// List the key files: id, when and by whom made, and which one your passphrase opens (*)
    List,
    /// Remove a key file by its id (or a prefix of it); the one your passphrase opens, and the
    /// last one, cannot be removed
    Remove(KeyRemoveArgs),
}

#[derive(Args, Debug)]
pub struct KeyRemoveArgs {
    /// The key's id, as `key list` shows it
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Args, Debug)]
pub struct KeyExportArgs {
    /// Where to write it ('-' or nothing: stdout)
    #[arg(value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// A form to print and type back in: 23 lines of hex, each with a checksum
    #[arg(long)]
    pub paper: bool,
}

#[derive(Args, Debug)]
pub struct KeyImportArgs {
    /// The exported key ('-' or nothing: stdin), as JSON or in its paper form
    #[arg(value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
}

/// What create keeps and extract applies beyond contents, mode and times (borg's switches).
#[derive(Args, Debug, Default)]
pub struct MetaArgs {
    /// Leave POSIX ACLs out
    #[arg(long)]
    pub noacls: bool,
    /// Leave extended attributes out (ACLs apart; file capabilities are attributes)
    #[arg(long)]
    pub noxattrs: bool,
    /// Leave Linux inode flags out (immutable, append-only, nodump, noatime, ...)
    #[arg(long)]
    pub noflags: bool,
    /// Owners by number only: create stores no user and group names, extract gives the
    /// stored ids rather than mapping the names to this system's
    #[arg(long)]
    pub numeric_ids: bool,
}

impl MetaArgs {
    pub fn options(&self) -> crate::source::fsmeta::MetaOptions {
        crate::source::fsmeta::MetaOptions {
            acls: !self.noacls,
            xattrs: !self.noxattrs,
            flags: !self.noflags,
            numeric_ids: self.numeric_ids,
        }
    }
}

/// `--progress` / `--no-progress`: forced on, forced off, or automatic (stderr is a terminal).
#[derive(Args, Debug, Default)]
pub struct ProgressArgs {
    /// Show progress on stderr, whatever it is (default: when stderr is a terminal; to a file
    /// or a pipe, one line at most every second)
    #[arg(long, conflicts_with = "no_progress")]
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
    /// Like --exclude, letters matching either case ('*.JPG' leaves out photo.jpg); repeatable
    #[arg(long = "iexclude", value_name = "GLOB")]
    pub iexclude: Vec<String>,
    /// Read such patterns from FILE, one per line ('#' starts a comment)
    #[arg(long = "iexclude-from", value_name = "FILE")]
    pub iexclude_from: Vec<std::path::PathBuf>,
    /// Leave out the contents of directories holding a file (or anything) named NAME; the
    /// directory itself is kept (repeatable: .nobackup, .git …)
    #[arg(long, value_name = "NAME")]
    pub exclude_if_present: Vec<String>,
    /// With --exclude-if-present: keep the tag files themselves
    #[arg(long)]
    pub keep_exclude_tags: bool,
    /// Leave out regular files larger than SIZE (bytes, or with k, M, G, T: powers of 1024,
    /// as 500k, 1M, 2.5G)
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub exclude_larger_than: Option<u64>,
    /// Stay on the file system of each PATH (do not descend into mount points)
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Leave out files and directories flagged nodump (chattr +d)
    #[arg(long)]
    pub exclude_nodump: bool,
    #[command(flatten)]
    pub meta: MetaArgs,
    /// Print statistics when done
    #[arg(long, short = 's')]
    pub stats: bool,
    /// Print the result as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// A comment stored with the archive
    #[arg(long, default_value = "")]
    pub comment: String,
    /// A tag for the archive, to filter on (list --tag, prune --group-by tags); repeatable,
    /// or several separated by commas
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// The archive's time instead of now, to import older backups: 2024-05-01, "2024-05-01
    /// 13:45[:30]" (local time) or RFC 3339 (2024-05-01T13:45:00Z, or with an offset)
    #[arg(long, value_name = "TIME", value_parser = timestamp)]
    pub timestamp: Option<crate::util::clock::Timestamp>,
    /// How new chunks are compressed: auto[,LEVEL] (zstd at LEVEL, default 1, where entropy
    /// coding pays; lz4 where the data is noise and runs), lz4 (fastest), zstd[,LEVEL] (LEVEL
    /// 1-22, default 3) or none. Any mix reads back (default: auto,1)
    #[arg(long, short = 'C', value_name = "SPEC")]
    pub compression: Option<String>,
    /// Worker threads for hashing, compression and encryption (default: CAIRN_THREADS or the
    /// number of cores)
    #[arg(long, value_name = "N", value_parser = threads, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub progress: ProgressArgs,
    /// Walk, apply the excludes, read and compress what changed, and say what would be
    /// stored, without writing anything to the repository
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Print each item with how it is taken (A added, M modified, U unchanged, E could not
    /// be read, or its type: d directory, l symlink, ...), as the backup goes (with
    /// --log-json: a "file" record each); with --dry-run, how it would be
    #[arg(long)]
    pub list: bool,
    /// With --list: only the items with these letters (e.g. AME: what changed, and errors)
    #[arg(long, value_name = "LETTERS", requires = "list")]
    pub filter: Option<String>,
    /// The name under which standard input ('-' as the PATH) or a command's output is stored
    #[arg(long, value_name = "NAME", default_value = "stdin")]
    pub stdin_name: String,
    /// The permission bits of that file, in octal
    #[arg(long, value_name = "MODE", default_value = "0600")]
    pub stdin_mode: String,
    /// Run the command given after '--' and store its standard output as one file
    /// (--stdin-name); the backup fails, and nothing is saved, if the command fails
    #[arg(long)]
    pub stdin_from_command: bool,
    /// Back up the paths listed in FILE, one per line ('-' for standard input), besides any
    /// given; lines are trimmed, and empty lines and lines starting with # are skipped
    #[arg(long, value_name = "FILE", conflicts_with = "files_from0")]
    pub files_from: Option<std::path::PathBuf>,
    /// Like --files-from, the paths separated by NUL bytes (find -print0), taken verbatim
    #[arg(long, value_name = "FILE")]
    pub files_from0: Option<std::path::PathBuf>,
    /// Archive name (a series: the same name may be used for every backup)
    pub name: String,
    /// Files and directories to back up (at least one, unless --files-from or a profile
    /// gives them); '-' for standard input; with --stdin-from-command, the command and its
    /// arguments (after '--')
    #[arg(value_name = "PATH")]
    pub paths: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// Directory to restore into (created if missing; default: the current directory)
    #[arg(long, short = 't', value_name = "DIR")]
    pub target: Option<std::path::PathBuf>,
    /// Worker threads for reading, decrypting and writing (default: CAIRN_THREADS or the number
    /// of cores)
    #[arg(long, value_name = "N", value_parser = threads, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub progress: ProgressArgs,
    #[command(flatten)]
    pub meta: MetaArgs,
    #[command(flatten)]
    pub reshape: ReshapeArgs,
    /// What to do where the target holds a file already: if-changed compares contents and
    /// writes only the files that differ, setting the metadata of the others; always writes
    /// every file again; never leaves whatever is there as it is and restores only what is
    /// missing
    #[arg(long, value_enum, default_value_t = OverwriteArg::IfChanged, value_name = "WHEN")]
    pub overwrite: OverwriteArg,
    /// Make the tree exactly the archive's: replace a directory that stands where a file
    /// goes, and after the restore remove what the restored directories hold that the archive
    /// does not (the whole target when no PATH is given); needs an explicit --target. Names
    /// the archive holds are kept, even when --exclude leaves them out; the repository being
    /// read and cairn's cache are never touched
    #[arg(long)]
    pub delete: bool,
    /// With --delete: accept a target that is the root of a file system (/ or a mount point),
    /// from which --delete then removes whatever the archive does not hold
    #[arg(long, requires = "delete")]
    pub no_preserve_root: bool,
    /// Change nothing and fetch nothing: say what would be written, fixed and deleted
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Once restored, read every restored file back from the target (flushed to disk and
    /// dropped from the page cache first) and compare it with the archive, chunk by chunk:
    /// catches a disk that silently lost writes (exit 2 when a file differs)
    #[arg(long, conflicts_with = "dry_run")]
    pub verify: bool,
    /// With --dry-run: print each path with what would happen to it (write, fix: only the
    /// metadata, same, keep: left as it is, skip: not restored, said in a warning, delete)
    #[arg(long, requires = "dry_run")]
    pub list: bool,
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// Restore only these paths (as stored in the archive) and what is below them; a path with
    /// `*`, `?` or `[` is a pattern (`*` within one component, `**` across: 'etc/*.conf').
    /// A path or pattern that matches nothing is named in a warning (exit 1)
    #[arg(value_name = "PATH")]
    pub paths: Vec<std::path::PathBuf>,
}

/// `--exclude` and `--strip-components`, for the commands that restore or export items.
#[derive(Args, Debug, Default)]
pub struct ReshapeArgs {
    /// Leave out items matching GLOB and everything below them (the rules of create
    /// --exclude: a pattern without '/' matches a name anywhere); repeatable
    #[arg(long = "exclude", value_name = "GLOB")]
    pub exclude: Vec<std::ffi::OsString>,
    /// Remove N leading components from every name; an item with no more than N is left out
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=4096), allow_negative_numbers = true)]
    pub strip_components: u64,
}

#[derive(Args, Debug)]
pub struct FindArgs {
    /// One JSON object per line
    #[arg(long)]
    pub json_lines: bool,
    /// Search only this archive: NAME (every archive of that name) or aid:PREFIX
    #[arg(long, short = 'a', value_name = "ARCHIVE")]
    pub archive: Option<String>,
    /// What to find: a pattern without '/' matches a file or directory name ('*.jpg',
    /// 'report-202?.pdf'); with '/', the whole stored path ('home/*/.ssh', 'home/**/*.pdf').
    /// Exit status 1 when nothing matches
    #[arg(value_name = "GLOB")]
    pub pattern: std::ffi::OsString,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// The path as stored in the archive ('home/alice/notes.txt'); a directory is written as
    /// a tar stream of itself and what is below it
    #[arg(value_name = "PATH")]
    pub path: std::path::PathBuf,
}

#[derive(Args, Debug)]
pub struct ExportTarArgs {
    #[command(flatten)]
    pub reshape: ReshapeArgs,
    /// Archive: NAME (the newest archive of that name) or aid:PREFIX
    pub archive: String,
    /// The tar file to write ('-' for stdout); an existing file is replaced
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
    /// Export only these paths (as stored) and what is below them; patterns as for extract
    #[arg(value_name = "PATH")]
    pub paths: Vec<std::path::PathBuf>,
    /// Worker threads for reading and decrypting (default: CAIRN_THREADS or the number of
    /// cores)
    #[arg(long, value_name = "N", value_parser = threads, allow_negative_numbers = true)]
    pub threads: Option<usize>,
}

#[derive(Args, Debug)]
pub struct MountArgs {
    /// Stay in the foreground (default: return once mounted and serve in the background);
    /// Ctrl-C or SIGTERM then unmounts
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Chunks kept decrypted in memory for reads, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536), allow_negative_numbers = true)]
    pub cache_mib: u64,
    /// [ARCHIVE] MOUNTPOINT: with an archive (NAME or aid:PREFIX), its tree at MOUNTPOINT;
    /// without, one directory per archive
    #[arg(value_name = "[ARCHIVE] MOUNTPOINT", num_args = 1..=2, required = true)]
    pub targets: Vec<String>,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// Where cairn mount mounted an archive or a repository
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: std::path::PathBuf,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// One JSON object per line
    #[arg(long)]
    pub json_lines: bool,
    /// List the archives clients removed through an append-only server, with when (cairn
    /// undelete brings them back)
    #[arg(long, conflicts_with = "archive")]
    pub removed: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Archive to list the contents of: NAME or aid:PREFIX (default: list archives)
    pub archive: Option<String>,
}

/// Which archives a command considers, by what they carry.
#[derive(Args, Debug, Default)]
pub struct FilterArgs {
    /// Only archives with this tag (TAG,TAG: with all of them); repeatable: with any of them
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Only archives made on this host; repeatable
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only archives made by this user; repeatable
    #[arg(long = "user", value_name = "USER")]
    pub users: Vec<String>,
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

/// `extract --overwrite`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OverwriteArg {
    IfChanged,
    Always,
    Never,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EncryptionArg {
    /// Encrypted, with the cipher suite that is faster on this CPU (the next two); the key is
    /// stored in the repository, wrapped with your passphrase
    Repokey,
    /// AES-256-GCM, HMAC-SHA256 chunk ids, SHA-256 pack names: fastest on CPUs with AES and
    /// SHA instructions
    #[value(name = "repokey-aes256gcm")]
    RepokeyAes256gcm,
    /// ChaCha20-Poly1305, keyed BLAKE3 chunk ids and pack names: fastest on CPUs without them
    /// (most laptops before 2019-2021, the Raspberry Pi 4)
    #[value(name = "repokey-chacha20poly1305-blake3")]
    RepokeyChacha20poly1305Blake3,
    /// No encryption (for tests and benchmarks only)
    None,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PaddingArg {
    /// Objects are as long as their contents (full packs are still of a few sizes only)
    None,
    /// Pad each backup's packs to a total in steps of 3%, and index fragments and archives
    /// to steps of 2x, at secret offsets: sizes then tell the host a bucket, not what or how
    /// many files were backed up (about 1.5% more space)
    Buckets,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Encryption mode and cipher suite
    #[arg(
        long,
        short = 'e',
        value_enum,
        default_value = "repokey",
        env = "CAIRN_ENCRYPTION"
    )]
    pub encryption: EncryptionArg,
    /// Size padding of stored objects, against recognising files by their sizes
    #[arg(long, value_enum, default_value = "buckets")]
    pub padding: PaddingArg,
    /// Chunk files as the repository REPO does (its chunker parameters and key), so that
    /// archives copied from it (cairn copy) deduplicate with backups made here; its passphrase
    /// from CAIRN_FROM_PASSPHRASE, CAIRN_FROM_PASSCOMMAND or a prompt
    #[arg(long, value_name = "REPO")]
    pub copy_chunker_params_from: Option<String>,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Show this archive (NAME or aid:PREFIX) instead of the repository
    pub archive: Option<String>,
}
