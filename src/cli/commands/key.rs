//! `cairn key change-passphrase | add | list | remove | export | import`

use std::io::{Read, Write};
use std::path::Path;

use crate::cli::args::{KeyExportArgs, KeyImportArgs, KeyRemoveArgs};
use crate::cli::commands::Status;
use crate::cli::output;
use crate::cli::passphrase;
use crate::crypto::keyfile::MAX_KEY_FILE_LEN;
use crate::crypto::paper;
use crate::error::{Error, Result};
use crate::repo::lock::Lock;
use crate::repo::{keys, Repository};
use crate::store::Store;
use crate::util::text::printable;

pub fn change_passphrase(repo: &Repository) -> Result<Status> {
    let name = keys::change_passphrase(
        repo,
        || passphrase::obtain("Current passphrase", false),
        passphrase::obtain_new,
    )?;
    output::line(&format!("Passphrase changed; the key is now {name}"))?;
    Ok(Status::Ok)
}

pub fn add(repo: &Repository) -> Result<Status> {
    let name = keys::add(
        repo,
        || passphrase::obtain("Current passphrase", false),
        passphrase::obtain_new,
    )?;
    output::line(&format!(
        "Key added: {}",
        name.trim_start_matches("keys/").get(..8).unwrap_or(&name)
    ))?;
    Ok(Status::Ok)
}

pub fn list(repo: &Repository) -> Result<Status> {
    let mut status = Status::Ok;
    output::line(&format!(
        "  {:<10} {:<27} {:<24} {}",
        "ID", "CREATED", "BY", "COST (MEMORY × PASSES)"
    ))?;
    let label_key = repo.crypto().label_key();
    let repo_id = repo.id();
    for (name, file, used) in keys::list(repo)? {
        let id = name.trim_start_matches("keys/");
        let id = id.get(..8).unwrap_or(id);
        let mark = if used { '*' } else { ' ' };
        let kf = match file {
            Ok(kf) => kf,
            Err(e) => {
                status = Status::Warning;
                output::line(&format!("{mark} {id:<10} unreadable: {e}"))?;
                continue;
            }
        };
        // The label is sealed with a key derived from the master key: it opens here, for
        // every key file of this repository, and nowhere without the key.
        let (created, by) = match kf.label(&label_key, &repo_id) {
            None => ("-".to_string(), "-".to_string()),
            Some(Ok(l)) => (
                chrono::DateTime::parse_from_rfc3339(&l.created)
                    .ok()
                    .map(|t| {
                        output::time(crate::util::clock::Timestamp {
                            secs: t.timestamp(),
                            nanos: 0,
                        })
                    })
                    .unwrap_or_else(|| "-".into()),
                printable(&l.made_by),
            ),
            Some(Err(_)) => {
                status = Status::Warning;
                ("label damaged or forged".to_string(), "-".to_string())
            }
        };
        let cost = format!("{} MiB × {}", kf.kdf.memory_kib / 1024, kf.kdf.iterations);
        output::line(&format!("{mark} {id:<10} {created:<27} {by:<24} {cost}"))?;
    }
    Ok(status)
}

pub fn remove(repo: &Repository, args: &KeyRemoveArgs) -> Result<Status> {
    let name = keys::remove(repo, &args.id)?;
    output::line(&format!("Key {} removed", name.trim_start_matches("keys/")))?;
    Ok(Status::Ok)
}

pub fn export(repo: &Repository, args: &KeyExportArgs) -> Result<Status> {
    let key = keys::export(repo)?;
    let bytes = if args.paper {
        paper::encode(&key)?.into_bytes()
    } else {
        let mut k = key;
        k.push(b'\n');
        k
    };
    match args.file.as_deref().filter(|f| *f != Path::new("-")) {
        None => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .map_err(|e| Error::io("<stdout>", e)),
        // A new file only the owner can read (a key, even passphrase-protected, is nobody
        // else's), never one that exists, never through a link (`commands/outfile.rs`).
        Some(f) => crate::cli::outfile::write_whole(
            f,
            &bytes,
            crate::cli::outfile::NewFile {
                mode: 0o600,
                replace: false,
            },
        ),
    }?;
    Ok(Status::Ok)
}

pub fn import(store: &dyn Store, lock: &Lock, args: &KeyImportArgs) -> Result<Status> {
    let mut text = Vec::new();
    let limit = 4 * MAX_KEY_FILE_LEN as u64;
    match args.file.as_deref().filter(|f| *f != Path::new("-")) {
        None => std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut text)
            .map_err(|e| Error::io("<stdin>", e))?,
        Some(f) => std::fs::File::open(f)
            .and_then(|file| file.take(limit).read_to_end(&mut text))
            .map_err(|e| Error::io(f, e))?,
    };
    // The JSON of a key file, or its paper form.
    let (name, present) = keys::import(store, lock, text.trim_ascii(), || {
        passphrase::obtain("Passphrase of the key", false)
    })?;
    output::line(&if present {
        format!("The repository has this key already ({name}); nothing was changed.")
    } else {
        format!("Key stored as {name}.")
    })?;
    Ok(Status::Ok)
}
