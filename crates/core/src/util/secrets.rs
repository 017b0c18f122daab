//! The environment variables that carry a secret, kept from every program cairn starts: the
//! hooks of a profile, ssh (and what it runs, a `ProxyCommand`), a passcommand, and the command
//! of `--stdin-from-command`. None of them needs a passphrase or a cloud secret key to do its
//! job, and each may print or log its environment (`before = "env"`).
//!
//! Secret: every `CAIRN_…PASSPHRASE…` variable (`CAIRN_PASSPHRASE`, `CAIRN_NEW_PASSPHRASE`,
//! `CAIRN_FROM_PASSPHRASE`), and the S3 credentials that are secret (`AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, and any other `AWS_…SECRET…` or `AWS_…TOKEN…`). A passcommand
//! (`CAIRN_PASSCOMMAND`) names a program, not a secret, and stays: a hook that runs cairn
//! again gets its passphrase that way.

use std::ffi::OsString;

/// Whether the variable `name` carries a secret.
pub fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    (upper.starts_with("CAIRN_") && upper.contains("PASSPHRASE"))
        || (upper.starts_with("AWS_") && (upper.contains("SECRET") || upper.contains("TOKEN")))
}

/// The secret variables of this process's environment, by name.
pub fn present() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| k.to_str().is_some_and(is_secret))
        .collect()
}

/// Removes every secret variable from what `cmd` will run with.
pub fn scrub(cmd: &mut std::process::Command) -> &mut std::process::Command {
    for k in present() {
        cmd.env_remove(k);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::is_secret;

    #[test]
    fn passphrases_and_cloud_secrets_are_secret_and_the_rest_is_not() {
        for s in [
            "CAIRN_PASSPHRASE",
            "CAIRN_NEW_PASSPHRASE",
            "CAIRN_FROM_PASSPHRASE",
            "cairn_passphrase",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        ] {
            assert!(is_secret(s), "{s}");
        }
        for s in [
            "CAIRN_PASSCOMMAND",
            "CAIRN_REPO",
            "AWS_ACCESS_KEY_ID",
            "AWS_REGION",
            "PATH",
            "PASSPHRASE",
        ] {
            assert!(!is_secret(s), "{s}");
        }
    }
}
