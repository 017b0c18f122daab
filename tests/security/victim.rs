//! Who runs cairn in a hostile-local-user test (the victim: root, or a normal user), and who
//! the other local user, the attacker, is.

use crate::common::Repo;
use std::fs;

/// Who runs cairn in a hostile-local-user test, and who the other local user is: root against
/// nobody, or nobody (a normal user, 65534) against another (65533).
pub struct Victim {
    pub uid: u32,
    /// The binary it runs: the build itself for root; for nobody a copy it can reach.
    pub bin: std::path::PathBuf,
}

impl Victim {
    pub fn root() -> Self {
        Victim {
            uid: 0,
            bin: env!("CARGO_BIN_EXE_cairn").into(),
        }
    }

    /// Hands everything under the test's directory (repository, cache, sources) to nobody,
    /// with a copy of the binary; `None` (the test says it is skipped) without `setpriv`.
    pub fn nobody(repo: &Repo) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        let setpriv = std::process::Command::new("setpriv")
            .arg("--version")
            .output();
        if !setpriv.is_ok_and(|o| o.status.success()) {
            eprintln!("skipped as a normal user: no setpriv");
            return None;
        }
        let bin = repo.dir.path().join("bin/cairn");
        fs::create_dir_all(bin.parent().unwrap()).unwrap();
        fs::copy(env!("CARGO_BIN_EXE_cairn"), &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        Self::give(repo.dir.path(), 65534);
        Some(Victim { uid: 65534, bin })
    }

    /// Makes `uid` the owner of `path` and of everything under it.
    pub fn give(path: &std::path::Path, uid: u32) {
        for e in walkdir::WalkDir::new(path) {
            let e = e.unwrap();
            std::os::unix::fs::lchown(e.path(), Some(uid), Some(uid)).unwrap();
        }
    }

    /// The other local user, the attacker.
    pub fn other(&self) -> u32 {
        if self.uid == 0 {
            65534
        } else {
            65533
        }
    }

    pub fn command(
        &self,
        repo: &Repo,
        cwd: &std::path::Path,
        args: &[&str],
    ) -> std::process::Command {
        if self.uid == 0 {
            return repo.command(cwd, args, &[]);
        }
        let (reuid, regid) = (
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.uid),
        );
        let wrapper = ["setpriv", &reuid, &regid, "--clear-groups", "--"];
        let home = repo.dir.path().to_str().unwrap();
        repo.command_of(&self.bin, &wrapper, cwd, args, &[("HOME", home)])
    }

    pub fn run(&self, repo: &Repo, args: &[&str]) -> std::process::Output {
        self.command(repo, repo.dir.path(), args).output().unwrap()
    }
}

/// Two tests of one attack: `$root` with root as the victim, `$user` with a normal user (it
/// says it is skipped without `setpriv`). `$setup` makes what the victim owns, before a normal
/// user is handed the test's directory; `$attack` runs with what it returned.
macro_rules! against_root_and_a_normal_user {
    ($root:ident, $user:ident, $setup:expr, $attack:expr) => {
        #[test]
        fn $root() {
            let repo = crate::common::Repo::new();
            let made = ($setup)(&repo);
            ($attack)(&repo, &crate::victim::Victim::root(), made);
        }

        #[test]
        fn $user() {
            let repo = crate::common::Repo::new();
            let made = ($setup)(&repo);
            if let Some(victim) = crate::victim::Victim::nobody(&repo) {
                ($attack)(&repo, &victim, made);
            }
        }
    };
}
pub(crate) use against_root_and_a_normal_user;
