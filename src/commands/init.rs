//! `cairn init`: create an empty repository.

use crate::cli::{EncryptionArg, InitArgs, PaddingArg};
use crate::commands::{output, Status};
use crate::crypto::{EncryptionMode, Padding};
use crate::error::Result;
use crate::location::Location;
use crate::passphrase;
use crate::repo::{InitOptions, Repository};
use crate::settings::Settings;

pub fn run(location: &Location, settings: &Settings, args: &InitArgs) -> Result<Status> {
    let encryption = match args.encryption {
        EncryptionArg::Repokey => EncryptionMode::Repokey,
        EncryptionArg::None => EncryptionMode::None,
    };
    location.prepare_new(&settings.store.remote)?;
    let store = location.open_store(&settings.store)?;
    let opts = InitOptions {
        encryption,
        padding: match args.padding {
            PaddingArg::None => Padding::None,
            PaddingArg::Padme => Padding::Padme,
        },
        ..InitOptions::default()
    };
    let repo = Repository::init(store, &opts, || passphrase::obtain("New passphrase", true))?;
    crate::repo::known::remember(&location.memory_key(), &repo);
    output::line(&format!(
        "Initialized {} repository {} at {location}",
        encryption.as_str(),
        repo.id_hex()
    ))?;
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
