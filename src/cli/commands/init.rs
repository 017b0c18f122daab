//! `cairn init`: create an empty repository.

use crate::cli::args::{EncryptionArg, InitArgs, PaddingArg};
use crate::cli::commands::Status;
use crate::cli::output;
use crate::cli::passphrase;
use crate::cli::settings::Settings;
use crate::crypto::{EncryptionMode, Padding, Suite};
use crate::error::{Error, Result};
use crate::repo::{Chunking, InitOptions, Repository};
use crate::store::location::Location;

pub fn run(
    location: &Location,
    settings: &Settings,
    args: &InitArgs,
    allow_unencrypted: bool,
) -> Result<Status> {
    let (encryption, suite, chosen) = encryption(args.encryption);
    if args.copy_chunker_params_from.is_some() && encryption == EncryptionMode::None {
        return Err(Error::invalid(
            "--copy-chunker-params-from needs an encrypted repository: an unencrypted one's \
             chunker key is derived from its own id",
        ));
    }
    // The source first: nothing is made if it cannot be opened.
    let chunking = match &args.copy_chunker_params_from {
        Some(from) => Some(chunking_of(from, settings, allow_unencrypted)?),
        None => None,
    };
    let copied = chunking.is_some();
    if let Location::Local(dir) = location {
        refuse_a_repository(location, dir)?;
    }
    location.prepare_new(&settings.store.remote)?;
    let store = location.open_store(&settings.store)?;
    let opts = InitOptions {
        encryption,
        suite,
        padding: match args.padding {
            PaddingArg::None => Padding::None,
            PaddingArg::Buckets => Padding::Buckets,
        },
        chunking,
        ..InitOptions::default()
    };
    let repo = Repository::init(store, &opts, || passphrase::obtain("New passphrase", true))?;
    crate::repo::known::remember(&location.memory_key(), &repo);
    output::line(&format!(
        "Initialized {} repository {} at {location}",
        encryption.name(suite),
        repo.id_hex()
    ))?;
    if chosen {
        let other = Suite::ALL
            .into_iter()
            .find(|s| *s != suite)
            .unwrap_or(suite);
        output::line(&format!(
            "Cipher suite {}: {} (--encryption repokey-{} names the other).",
            suite.as_str(),
            Suite::why_here(),
            other.as_str()
        ))?;
    }
    if copied {
        output::line(&format!(
            "It chunks files as {} does: archives copied from there deduplicate with backups made here.",
            args.copy_chunker_params_from.as_deref().unwrap_or_default()
        ))?;
    }
    if encryption == EncryptionMode::Repokey {
        output::line(
            "The key is stored in the repository, protected by your passphrase. \
             Without the passphrase the data cannot be read: keep it safe.",
        )?;
    } else {
        output::line("Warning: this repository is NOT encrypted (--encryption none is meant for tests and benchmarks).")?;
    }
    Ok(Status::Ok)
}

/// `--encryption`: the mode and the cipher suite, and whether the suite was chosen for this
/// machine (plain `repokey`) rather than named.
fn encryption(arg: EncryptionArg) -> (EncryptionMode, Suite, bool) {
    match arg {
        EncryptionArg::Repokey => (EncryptionMode::Repokey, Suite::fastest_here(), true),
        EncryptionArg::RepokeyAes256gcm => (EncryptionMode::Repokey, Suite::Aes256Gcm, false),
        EncryptionArg::RepokeyChacha20poly1305Blake3 => (
            EncryptionMode::Repokey,
            Suite::ChaCha20Poly1305Blake3,
            false,
        ),
        EncryptionArg::None => (EncryptionMode::None, Suite::Aes256Gcm, false),
    }
}

/// `--copy-chunker-params-from`: how the repository at `from` chunks files, read by opening
/// it (its passphrase asked as the source's).
fn chunking_of(from: &str, settings: &Settings, allow_unencrypted: bool) -> Result<Chunking> {
    let from = Location::parse(from)?;
    let src = crate::repo::open::open(
        &from,
        &settings.store,
        &settings.tuning,
        allow_unencrypted,
        passphrase::obtain_source,
    )?;
    Ok(src.chunking())
}

/// `init` where a repository is already: said as what it is, not as a directory that is not
/// empty.
fn refuse_a_repository(location: &Location, dir: &std::path::Path) -> Result<()> {
    use crate::repo::foreign::{kind_of, Kind};
    match kind_of(dir) {
        Some(Kind::Cairn) => Err(Error::invalid(format!(
            "{location} is already a cairn repository (cairn -r {location} info shows it); cairn init makes a new one in an empty or new directory"
        ))),
        Some(other) => Err(Error::invalid(format!(
            "{location} is {}, not cairn's; cairn init makes a new repository in an empty or new directory",
            other.name()
        ))),
        None => Ok(()),
    }
}
