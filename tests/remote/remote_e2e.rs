//! End to end over real SFTP and S3 servers: everything that works on a local directory works
//! remotely. `scripts/test.sh` starts the servers and sets `CAIRN_TEST_SFTP` (with
//! `CAIRN_RSH`) and `CAIRN_TEST_S3` (with `AWS_*`); without them these tests say so and pass.
//!
//! The fault tests start a private server of their own, kill it in the middle of a create,
//! and check that the command fails clearly, nothing is committed, and after the server is
//! back `check` passes and the next create succeeds.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

fn base(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) => Some(v.trim_end_matches('/').to_string()),
        Err(_) => {
            eprintln!("skipped: {var} is not set (scripts/test.sh starts the servers)");
            None
        }
    }
}

/// A `Repo` whose CAIRN_REPO is `url` (the remote variables come from the environment).
fn remote_repo(url: &str, extra: &[(&str, &str)]) -> Repo {
    // The test helpers scrub CAIRN_* from the environment; the shared SFTP server's ssh
    // command must come along (a test's own server passes its own).
    let rsh = std::env::var("CAIRN_RSH").unwrap_or_default();
    let mut env = vec![("CAIRN_REPO", url)];
    if !rsh.is_empty() && !extra.iter().any(|(k, _)| *k == "CAIRN_RSH") {
        env.push(("CAIRN_RSH", rsh.as_str()));
    }
    env.extend_from_slice(extra);
    let r = Repo::with_env(&env);
    assert!(r.env.iter().any(|(k, v)| k == "CAIRN_REPO" && v == url));
    r
}

fn tree(root: &Path) {
    fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..6 {
        fs::write(
            root.join(format!("sub/f{i}")),
            random_bytes(300 + i, 120_000 + 20_000 * i as usize),
        )
        .unwrap();
    }
    fs::write(root.join("notes.txt"), "remote\n".repeat(1000)).unwrap();
    std::os::unix::fs::symlink("sub/f1", root.join("link")).unwrap();
}

fn end_to_end(url: String) {
    let repo = remote_repo(&url, &[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"));
    assert_eq!(
        repo.run_in(&base, &["create", "a", "a"], &[]).status.code(),
        Some(0)
    );
    fs::write(base.join("a/sub/f2"), b"changed").unwrap();
    fs::write(base.join("a/new"), random_bytes(77, 50_000)).unwrap();
    let o = repo.run_in(&base, &["create", "a2", "a"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(repo.ok(&["list"]).lines().count(), 2);
    assert!(repo.ok(&["list", "a2"]).contains("a/new"));
    let target = base.join("out");
    repo.ok(&["extract", "a2", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&base.join("a"), &target.join("a"));
    let c = repo.run(&["check", "--verify-data"]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    repo.ok(&["delete", "a"]);
    let out = repo.ok(&["compact"]);
    assert!(out.contains("freed"), "{out}");
    let c = repo.run(&["check", "--verify-data"]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    let target2 = base.join("out2");
    repo.ok(&["extract", "a2", "--target", target2.to_str().unwrap()]);
    assert_trees_equal(&base.join("a"), &target2.join("a"));
    assert!(repo.ok(&["info"]).contains("Archives:        1"));
}

fn unique(base: &str) -> String {
    format!("{base}/e2e-{:016x}", rand::random::<u64>())
}

#[test]
fn sftp_end_to_end() {
    if let Some(b) = base("CAIRN_TEST_SFTP") {
        let url = unique(&b);
        end_to_end(url.clone());
        // The test server is on this machine: its files are private whatever sftp-server's
        // umask (given with each directory's creation, and set with setstat behind each create).
        let (_, path) = url["sftp://".len()..].split_once('/').unwrap();
        let root = Path::new("/").join(path);
        let mut seen = 0;
        for e in walkdir::WalkDir::new(&root) {
            let e = e.unwrap();
            let mode = std::os::unix::fs::MetadataExt::mode(&e.metadata().unwrap()) & 0o777;
            let want = if e.file_type().is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode, want, "{}", e.path().display());
            seen += 1;
        }
        assert!(seen > 5, "{seen} objects under {}", root.display());
    }
}

#[test]
fn s3_end_to_end() {
    if let Some(b) = base("CAIRN_TEST_S3") {
        end_to_end(unique(&b));
    }
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a server script with the given variables.
fn script(name: &str, env: &[(&str, &str)]) {
    let mut c = Command::new("bash");
    c.arg(scripts().join(name));
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{name}: {}{}", stdout(&o), stderr(&o));
}

/// Kills a server by its pid file, with its per-connection children (sshd forks one per
/// session, and those would keep an open connection alive).
fn kill_server(pid_file: &Path) {
    let pid = fs::read_to_string(pid_file).unwrap().trim().to_string();
    let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let _ = fs::remove_file(pid_file);
}

/// A create whose server is killed before its third pack upload: exit 2, a clear message, nothing committed; then with the server back, check
/// passes and the next create works.
fn server_dies_during_create(
    url: &str,
    extra: &[(&str, &str)],
    pid_file: &Path,
    restart: &dyn Fn(),
) {
    let mut env = extra.to_vec();
    env.push(("CAIRN_PACK_SIZE", "100000"));
    let repo = remote_repo(url, &env);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"));
    for i in 0..20 {
        fs::write(
            base.join(format!("a/bulk{i}")),
            random_bytes(900 + i, 100_000),
        )
        .unwrap();
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    // The create stops itself before its third pack upload; the server is killed while it
    // is stopped, and the upload meets a dead server: no guessed delay.
    let child = cmd
        .env("CAIRN_TEST_CHEAP_KDF", "1")
        .env("CAIRN_FAULT", "name=packs/@3:put:pause")
        .current_dir(&base)
        .args(["create", "a", "a"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let paused = common::Paused::of(child, &["create", "a", "a"]);
    kill_server(pid_file);
    let start = Instant::now();
    let out = paused.resume();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cairn: error:") && !err.contains("panicked"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "gave up too slowly"
    );
    restart();
    // The lock of the failed create was released or belongs to a dead process.
    assert_eq!(repo.ok(&["list"]).lines().count(), 0, "nothing committed");
    let c = repo.run(&["check"]);
    assert!(
        matches!(c.status.code(), Some(0) | Some(1)),
        "{}",
        stdout(&c)
    );
    let o = repo.run_in(&base, &["create", "a", "a"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let target = base.join("out");
    repo.ok(&["extract", "a", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&base.join("a"), &target.join("a"));
    eprintln!("server killed during create: exit 2 ({}), nothing committed; after restart check passed and create succeeded", err.lines().last().unwrap_or(""));
}

#[test]
fn sftp_server_dies_during_create() {
    if base("CAIRN_TEST_SFTP").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sdir = dir.path().join("sshd");
    let port = free_port().to_string();
    let env = [
        ("SFTP_DIR", sdir.to_str().unwrap()),
        ("SFTP_PORT", port.as_str()),
    ];
    script("sftp-up.sh", &env);
    let rsh = format!("ssh -F {}", sdir.join("ssh_config").display());
    let url = format!("sftp://sftptest{}/repo", sdir.join("data").display());
    let restart = || script("sftp-up.sh", &env);
    server_dies_during_create(
        &url,
        &[("CAIRN_RSH", rsh.as_str())],
        &sdir.join("sshd.pid"),
        &restart,
    );
    script("sftp-down.sh", &env);
}

/// Against the S3 server the suite runs with: rclone (scripts/test.sh), or Garage when
/// `CAIRN_TEST_S3_SERVER=garage` (scripts/test-garage.sh). A private instance of it is started
/// for this test, so killing it disturbs no other test.
#[test]
fn s3_server_dies_during_create() {
    if base("CAIRN_TEST_S3").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sdir = dir.path().join("s3");
    let port = free_port().to_string();
    let garage = std::env::var("CAIRN_TEST_S3_SERVER").is_ok_and(|s| s == "garage");
    let (rpc, admin) = (free_port().to_string(), free_port().to_string());
    let rclone = std::env::var("RCLONE_BINARY").unwrap_or_default();
    let sdir_s = sdir.to_str().unwrap();
    let (up, down, pid_file, env): (&str, &str, PathBuf, Vec<(&str, &str)>) = if garage {
        (
            "garage-up.sh",
            "garage-down.sh",
            sdir.join("garage.pid"),
            vec![
                ("GARAGE_DIR", sdir_s),
                ("GARAGE_S3_PORT", port.as_str()),
                ("GARAGE_RPC_PORT", rpc.as_str()),
                ("GARAGE_ADMIN_PORT", admin.as_str()),
            ],
        )
    } else {
        (
            "s3-up.sh",
            "s3-down.sh",
            sdir.join("rclone.pid"),
            vec![
                ("S3_DIR", sdir_s),
                ("S3_PORT", port.as_str()),
                ("RCLONE_BINARY", rclone.as_str()),
            ],
        )
    };
    script(up, &env);
    let url = format!("s3://127.0.0.1:{port}/backup-test/repo");
    let restart = || script(up, &env);
    server_dies_during_create(&url, &[("CAIRN_S3_RETRIES", "2")], &pid_file, &restart);
    script(down, &env);
}

/// A relay to `target` on this machine whose uploads (client to server) cross at
/// `bytes_per_sec`; downloads are not held back. Returns the port it listens on.
fn slow_uplink(target: u16, bytes_per_sec: usize) -> u16 {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    fn pump(mut from: TcpStream, mut to: TcpStream, rate: Option<usize>) {
        let mut buf = [0u8; 1024];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            if let Some(r) = rate {
                std::thread::sleep(Duration::from_secs_f64(n as f64 / r as f64));
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pump(client, server, Some(bytes_per_sec)));
            std::thread::spawn(move || pump(s2, c2, None));
        }
    });
    port
}

/// A backup over a slow uplink, where one upload takes longer than the S3 client's own
/// 30 s limit for a request: it waits for it, and the backup succeeds (it was sent again and
/// again, and the backup failed after 120 s of retries).
#[test]
fn s3_upload_slower_than_thirty_seconds() {
    let Some(b) = base("CAIRN_TEST_S3") else {
        return;
    };
    let url = unique(&b);
    // s3://127.0.0.1:PORT/bucket/prefix, reached again through the slow relay.
    let rest = &url["s3://".len()..];
    let (host, path) = rest.split_once('/').unwrap();
    let port: u16 = host.rsplit_once(':').unwrap().1.parse().unwrap();
    let relay = slow_uplink(port, 8_000);
    let slow_url = format!("s3://127.0.0.1:{relay}/{path}");
    let repo = remote_repo(&url, &[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    let data = random_bytes(5, 300_000);
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), &data).unwrap();
    let started = Instant::now();
    let o = repo.run_in(&base, &["-r", &slow_url, "create", "slow", "src"], &[]);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        took > Duration::from_secs(31),
        "the upload took only {took:?}"
    );
    let target = base.join("out");
    repo.ok(&["extract", "slow", "--target", target.to_str().unwrap()]);
    assert!(fs::read(target.join("src/f")).unwrap() == data);
}
