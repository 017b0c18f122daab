//! `cairn ui`: the real binary serving a real repository, asked over HTTP as a browser would
//! (and as pages and programs that must be refused would). The page itself is driven in a
//! real browser by scripts/ui-test.sh.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, Repo};

/// A running `cairn ui`.
struct Ui {
    child: Child,
    /// The address as printed: `127.0.0.1:PORT`.
    host: String,
    /// Kept open: the ui writes to it.
    _stdout: BufReader<std::process::ChildStdout>,
    port: u16,
    token: String,
}

/// An answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Ui {
    fn start(repo: &Repo, config: &Path, extra: &[&str]) -> Ui {
        Self::start_with(repo, config, &["--listen", "127.0.0.1:0"], extra, &[])
    }

    /// `cairn ui` with `listen` (its options), `extra` after them, `env` besides the
    /// repository's (a name given without a value is left out).
    fn start_with(
        repo: &Repo,
        config: &Path,
        listen: &[&str],
        extra: &[&str],
        env_more: &[(&str, &str)],
    ) -> Ui {
        let mut env: Vec<(&str, &str)> = repo
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .filter(|(k, _)| !env_more.iter().any(|(n, v)| n == k && v.is_empty()))
            .collect();
        let config = config.to_str().unwrap();
        env.push(("XDG_CONFIG_HOME", config));
        env.extend(env_more.iter().filter(|(_, v)| !v.is_empty()));
        let mut args = vec!["ui"];
        args.extend_from_slice(listen);
        args.extend_from_slice(extra);
        let mut child = common::cairn_command(&args, &env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        let rest = url.strip_prefix("http://").unwrap();
        let (host, token) = rest.split_once("/?token=").unwrap();
        let port = host.rsplit_once(':').unwrap().1;
        Ui {
            child,
            host: host.to_string(),
            _stdout: stdout,
            port: port.parse().unwrap(),
            token: token.to_string(),
        }
    }

    fn host(&self) -> String {
        self.host.clone()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn connect(&self) -> TcpStream {
        let ip = self.host.rsplit_once(':').unwrap().0;
        let ip: std::net::IpAddr = ip.trim_matches(|c| c == '[' || c == ']').parse().unwrap();
        TcpStream::connect((ip, self.port)).unwrap()
    }

    /// A request with these headers (the Host header included), and a body.
    fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut s = self.connect();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).unwrap();
        // A refusal may close before reading the body: the connection is then reset after
        // the answer, which is kept.
        let mut all = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !all.is_empty() => {
                    break
                }
                Err(e) => panic!("{method} {path}: {e}"),
            }
        }
        let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&all[..split]).into_owned();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        let mut body = all[split + 4..].to_vec();
        if headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v == "chunked")
        {
            body = unchunk(&body);
        }
        Answer {
            status,
            headers,
            body,
        }
    }

    /// A request as the page makes it: this Host, the token in its header.
    fn ask(&self, method: &str, path: &str, body: &str) -> Answer {
        let host = self.host();
        self.raw(
            method,
            path,
            &[("Host", &host), ("X-Cairn-Token", &self.token)],
            body,
        )
    }

    /// Follows job `id` until it ends; its last state.
    fn wait_job(&self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut records = Vec::new();
        let mut from = 0;
        loop {
            let v = self
                .ask("GET", &format!("/api/jobs/{id}?from={from}&wait=5"), "")
                .json();
            records.extend(v["records"].as_array().unwrap().iter().cloned());
            from = v["next"].as_u64().unwrap() as usize;
            if v["running"] == false {
                let mut v = v;
                v["records"] = Value::Array(records);
                return v;
            }
            assert!(Instant::now() < deadline, "job {id} did not end");
        }
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let end = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..end]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[end + 2..end + 2 + n]);
        b = &b[end + 4 + n..];
    }
}

/// A repository with archives "one" and "two" of `src` (notes.txt changes between them).
fn two_archives() -> (Repo, std::path::PathBuf) {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    std::fs::create_dir_all(src.join("docs")).unwrap();
    std::fs::write(src.join("notes.txt"), b"first").unwrap();
    std::fs::write(src.join("docs/a.bin"), common::random_bytes(1, 100_000)).unwrap();
    repo.ok(&["create", "one", src.to_str().unwrap()]);
    std::fs::write(src.join("notes.txt"), b"second, longer").unwrap();
    repo.ok(&["create", "two", src.to_str().unwrap()]);
    (repo, src)
}

fn archive_id(ui: &Ui, name: &str) -> String {
    let v = ui.ask("GET", "/api/repos/0/archives", "").json();
    v["archives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn key(path: &str) -> String {
    hex::encode(path.trim_start_matches('/'))
}

#[test]
fn ui_lists_browses_finds_diffs_and_restores_what_the_cli_made() {
    let (repo, src) = two_archives();
    let config = repo.dir.path().join("config");
    let ui = Ui::start(&repo, &config, &[]);

    // The page, with the token; its headers keep it from being framed or leaking the token.
    let host = ui.host();
    let page = ui.raw(
        "GET",
        &format!("/?token={}", ui.token),
        &[("Host", &host)],
        "",
    );
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains(&ui.token));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert!(page
        .header("content-security-policy")
        .is_some_and(|c| c.contains("script-src 'self'")));

    let repos = ui.ask("GET", "/api/repos", "").json();
    assert_eq!(repos["repos"][0]["location"], repo.path.to_str().unwrap());
    let list = ui.ask("GET", "/api/repos/0/archives", "").json();
    let names: Vec<&str> = list["archives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one", "two"]);
    assert!(
        list["archives"][0]["stats"]["deduplicated_size"]
            .as_u64()
            .unwrap()
            > 100_000
    );
    assert!(list["size"].as_u64().unwrap() > 100_000);

    // Browse: the directory of the source, in pages.
    let two = archive_id(&ui, "two");
    let dir = ui
        .ask(
            "GET",
            &format!(
                "/api/repos/0/archives/{two}/tree?path={}&limit=1",
                key(src.to_str().unwrap())
            ),
            "",
        )
        .json();
    assert_eq!(dir["total"], 2);
    assert_eq!(dir["entries"][0]["name"], "docs");
    assert_eq!(dir["entries"][0]["type"], "dir");
    let rest = ui
        .ask(
            "GET",
            &format!(
                "/api/repos/0/archives/{two}/tree?path={}&offset=1",
                key(src.to_str().unwrap())
            ),
            "",
        )
        .json();
    assert_eq!(rest["entries"][0]["name"], "notes.txt");
    assert_eq!(rest["entries"][0]["size"], 14);

    // Find and diff.
    let found = ui
        .ask("GET", "/api/repos/0/find?pattern=notes.txt", "")
        .json();
    assert_eq!(found["found"].as_array().unwrap().len(), 2);
    let one = archive_id(&ui, "one");
    let diff = ui
        .ask("GET", &format!("/api/repos/0/diff?a={one}&b={two}"), "")
        .json();
    assert_eq!(diff["total"], 1);
    assert!(diff["changes"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with("notes.txt"));

    // A tar of one file.
    let notes = key(&format!("{}/notes.txt", src.display()));
    let tar = ui.ask(
        "GET",
        &format!("/api/repos/0/archives/{two}/tar?path={notes}"),
        "",
    );
    assert_eq!(tar.status, 200);
    let mut archive = tar::Archive::new(&tar.body[..]);
    let mut entries = archive.entries().unwrap();
    let mut entry = entries.next().unwrap().unwrap();
    let mut held = Vec::new();
    entry.read_to_end(&mut held).unwrap();
    assert_eq!(held, b"second, longer");

    // Restore of one file: the same bytes, where asked.
    let target = repo.dir.path().join("restored");
    let job = ui
        .ask(
            "POST",
            "/api/repos/0/restore",
            &serde_json::json!({"archive": one, "paths": [notes], "target": target}).to_string(),
        )
        .json();
    let done = ui.wait_job(job["id"].as_u64().unwrap());
    assert_eq!(done["exit_status"], 0, "{done}");
    assert_eq!(done["summary"]["command"], "extract");
    let restored = target
        .join(src.strip_prefix("/").unwrap())
        .join("notes.txt");
    assert_eq!(std::fs::read(restored).unwrap(), b"first");
    assert!(!target
        .join(src.strip_prefix("/").unwrap())
        .join("docs")
        .exists());
}

#[test]
fn ui_refuses_requests_without_the_token_or_from_elsewhere() {
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    let ui = Ui::start(&repo, &config, &[]);
    let host = ui.host();
    let token = ui.token.clone();
    let refused = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        let a = ui.raw(method, path, headers, body);
        assert_eq!(
            a.status,
            403,
            "{method} {path} {headers:?}: {}",
            String::from_utf8_lossy(&a.body)
        );
    };
    refused("GET", "/", &[("Host", &host)], "");
    refused("GET", "/api/repos", &[("Host", &host)], "");
    refused("GET", "/app.js", &[("Host", &host)], "");
    refused(
        "GET",
        "/api/repos",
        &[("Host", &host), ("X-Cairn-Token", &token[1..])],
        "",
    );
    // DNS rebinding: the page of another name that resolves to 127.0.0.1.
    let port = ui.port.to_string();
    let rebound = format!("evil.example:{port}");
    refused(
        "GET",
        &format!("/?token={token}"),
        &[("Host", &rebound)],
        "",
    );
    refused("GET", &format!("/?token={token}"), &[], "");
    // Another site's page.
    for origin in [
        "http://evil.example",
        "null",
        &format!("http://127.0.0.1:{port}.evil.example"),
    ] {
        refused(
            "GET",
            "/api/repos",
            &[
                ("Host", &host),
                ("X-Cairn-Token", &token),
                ("Origin", origin),
            ],
            "",
        );
    }
    // What writes takes the token only from its header (a form or an image cannot set one).
    refused(
        "POST",
        &format!("/api/repos/0/check?token={token}"),
        &[("Host", &host), ("Content-Length", "0")],
        "",
    );
    assert_eq!(
        ui.ask("GET", "/api/jobs", "").json()["jobs"],
        serde_json::json!([])
    );
    // The page's own requests pass.
    let own = format!("http://{host}");
    let a = ui.raw(
        "GET",
        "/api/repos",
        &[("Host", &host), ("X-Cairn-Token", &token), ("Origin", &own)],
        "",
    );
    assert_eq!(a.status, 200);
}

#[test]
fn ui_says_what_is_wrong_with_a_request() {
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    let ui = Ui::start(&repo, &config, &[]);
    let two = archive_id(&ui, "two");
    let said = |method: &str, path: &str, body: &str| -> (u16, String) {
        let a = ui.ask(method, path, body);
        let v = a.json();
        (
            a.status,
            v["error"].as_str().unwrap_or_default().to_string(),
        )
    };
    let (status, e) = said(
        "POST",
        "/api/repos/0/restore",
        &serde_json::json!({"archive": two, "target": "restored"}).to_string(),
    );
    assert_eq!(status, 400);
    assert!(e.contains("whole path"), "{e}");
    let (status, e) = said("GET", "/api/repos/7/archives", "");
    assert_eq!(status, 404);
    assert!(e.contains("no repository 7"), "{e}");
    let (status, e) = said("GET", "/api/repos/0/archives/abc/tree", "");
    assert_eq!(status, 400);
    assert!(e.contains("whole id"), "{e}");
    let (status, e) = said(
        "GET",
        &format!("/api/repos/0/archives/{two}/tree?path=6e6f"),
        "",
    );
    assert_eq!(status, 400);
    assert!(e.contains("no no in the archive"), "{e}");
    let (status, e) = said("POST", "/api/repos/0/backup", "{}");
    assert_eq!(status, 400);
    assert!(e.contains("profile"), "{e}");
    // A restore into the repository itself is refused as extract refuses it.
    let job = ui
        .ask(
            "POST",
            "/api/repos/0/restore",
            &serde_json::json!({"archive": two, "target": repo.path}).to_string(),
        )
        .json();
    let done = ui.wait_job(job["id"].as_u64().unwrap());
    assert_eq!(done["exit_status"], 2, "{done}");
    assert!(done["summary"]["error"]
        .as_str()
        .unwrap()
        .contains("repository"));
}

#[test]
fn ui_picks_a_free_port_unless_told_and_answers_to_the_address_it_prints() {
    // A port known in advance (8484 was the default) is one another local user can hold
    // first, and plant a service worker there that later sees the address with its token.
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    let a = Ui::start_with(&repo, &config, &[], &[], &[]);
    let b = Ui::start_with(&repo, &config, &[], &[], &[]);
    assert_ne!(a.port, b.port);
    assert!(a.host.starts_with("127.0.0.1:"), "{}", a.host);
    // What an earlier page at this address left is cleared; no service worker is served.
    let host = a.host();
    let page = a.raw(
        "GET",
        &format!("/?token={}", a.token),
        &[("Host", &host)],
        "",
    );
    assert_eq!(page.status, 200);
    assert!(page
        .header("clear-site-data")
        .is_some_and(|v| v.contains("storage")));
    let sw = a.raw(
        "GET",
        &format!("/app.js?token={}", a.token),
        &[("Host", &host), ("Service-Worker", "script")],
        "",
    );
    assert_eq!(sw.status, 403);
    // Another loopback address: printed as it is, and answered under that name.
    let other = Ui::start_with(&repo, &config, &["--listen", "127.0.0.2:0"], &[], &[]);
    assert!(other.host.starts_with("127.0.0.2:"), "{}", other.host);
    assert_eq!(other.ask("GET", "/api/repos", "").status, 200);
    // A port alone, or localhost:PORT, is a loopback address; nonsense is said so.
    let o = common::cairn(&["ui", "--listen", "localhost:x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        common::stderr(&o).contains("ADDRESS:PORT"),
        "{}",
        common::stderr(&o)
    );
}

#[test]
fn a_stalled_download_holds_no_lock_and_keeps_no_request_waiting() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.bin"), common::random_bytes(7, 24 << 20)).unwrap();
    repo.ok(&["create", "big", src.to_str().unwrap()]);
    let config = repo.dir.path().join("config");
    let ui = Ui::start(&repo, &config, &[]);
    let id = archive_id(&ui, "big");
    let key = key(&format!("{}/big.bin", src.display()));
    // A download whose answer is never read (a paused browser).
    let mut stalled = ui.connect();
    let host = ui.host();
    write!(
        stalled,
        "GET /api/repos/0/archives/{id}/tar?path={key}&token={} HTTP/1.1\r\nHost: {host}\r\n\r\n",
        ui.token
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // The page goes on, for that repository too, and another client may take its lock.
    let started = Instant::now();
    for _ in 0..3 {
        assert_eq!(ui.ask("GET", "/api/repos", "").status, 200);
        assert_eq!(ui.ask("GET", "/api/repos/0/archives", "").status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    let o = repo.run(&["--lock-wait", "5", "compact"]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    drop(stalled);
}

#[test]
fn ui_says_which_profiles_it_cannot_use_and_a_repository_made_since() {
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    std::fs::create_dir_all(config.join("cairn")).unwrap();
    std::fs::write(config.join("cairn/broken.toml"), "repository = [").unwrap();
    let ui = Ui::start(&repo, &config, &[]);
    let repos = ui.ask("GET", "/api/repos", "").json();
    let broken = &repos["repos"][0];
    assert_eq!(broken["label"], "broken");
    assert!(
        broken["error"].as_str().unwrap().contains("broken.toml"),
        "{broken}"
    );
    assert_eq!(repos["repos"][1]["location"], repo.path.to_str().unwrap());
    // Another repository made where the one the ui opened was.
    std::fs::rename(&repo.path, repo.dir.path().join("old")).unwrap();
    repo.ok(&["init"]);
    let a = ui.ask("GET", "/api/repos/1/archives", "");
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.json()["error"]
        .as_str()
        .unwrap()
        .contains("not the one cairn ui opened"));
    // A parameter axum refuses is said as every error is.
    let a = ui.ask("GET", "/api/jobs/1?wait=x", "");
    assert_eq!(a.status, 400);
    assert!(a.json()["error"].as_str().unwrap().contains("wait"));
}

#[test]
fn a_job_never_asks_on_the_uis_terminal() {
    // A repository that did not open when the ui started (it was made after): its job
    // has no passphrase, and fails saying so instead of asking where the page cannot see.
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    std::fs::create_dir_all(config.join("cairn")).unwrap();
    let later = repo.dir.path().join("later");
    std::fs::write(
        config.join("cairn/later.toml"),
        format!("repository = {:?}\n", later.to_str().unwrap()),
    )
    .unwrap();
    let ui = Ui::start_with(
        &repo,
        &config,
        &["--listen", "127.0.0.1:0"],
        &[],
        &[("CAIRN_PASSPHRASE", ""), ("CAIRN_REPO", "")],
    );
    let repos = ui.ask("GET", "/api/repos", "").json();
    assert_eq!(repos["repos"][0]["label"], "later");
    assert!(!repos["repos"][0]["error"].is_null());
    repo.ok(&["-r", later.to_str().unwrap(), "init"]);
    let job = ui.ask("POST", "/api/repos/0/check", "{}").json();
    let done = ui.wait_job(job["id"].as_u64().unwrap());
    assert_eq!(done["exit_status"], 2, "{done}");
    assert!(
        done["summary"]["error"]
            .as_str()
            .unwrap()
            .contains("cairn ui has no passphrase"),
        "{done}"
    );
}

#[test]
fn a_signal_to_one_job_is_not_taken_for_the_next_ones() {
    // Each job's first signal stops that job; the ui goes on. (The handlers of the first
    // job once stayed armed: after one interrupted job, the next signal ended the ui.)
    let (repo, src) = two_archives();
    let config = repo.dir.path().join("config");
    std::fs::create_dir_all(config.join("cairn")).unwrap();
    std::fs::write(
        config.join("cairn/home.toml"),
        format!(
            "repository = {:?}\n[create]\npaths = [{:?}]\n[hooks]\nafter = \"sleep 2\"\n",
            repo.path.to_str().unwrap(),
            src.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut ui = Ui::start(&repo, &config, &[]);
    let pid = nix::unistd::Pid::from_raw(ui.child.id() as i32);
    for round in 0..3 {
        let job = ui.ask("POST", "/api/repos/0/backup", "{}");
        assert_eq!(job.status, 200, "{}", String::from_utf8_lossy(&job.body));
        std::thread::sleep(Duration::from_millis(1000));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            ui.alive(),
            "round {round}: the ui ended at a job's first signal"
        );
        let done = ui.wait_job(job.json()["id"].as_u64().unwrap());
        assert!(!done["exit_status"].is_null(), "{done}");
    }
    assert_eq!(ui.ask("GET", "/api/repos", "").status, 200);
    // No job running: a signal stops the ui itself.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ui.alive() {
        assert!(Instant::now() < deadline, "the ui did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ui_restores_and_downloads_exactly_the_names_chosen() {
    // Names that read as patterns: the chosen one, not what it would match.
    let repo = Repo::new();
    let src = repo.dir.path().join("g");
    std::fs::create_dir_all(&src).unwrap();
    for name in ["[x]", "x", "a*", "abc", "a-private"] {
        std::fs::write(src.join(name), name).unwrap();
    }
    repo.ok(&["create", "globs", src.to_str().unwrap()]);
    let config = repo.dir.path().join("config");
    let ui = Ui::start(&repo, &config, &[]);
    let id = archive_id(&ui, "globs");
    let target = repo.dir.path().join("restored");
    let chosen = [
        key(&format!("{}/[x]", src.display())),
        key(&format!("{}/a*", src.display())),
    ];
    let job = ui
        .ask(
            "POST",
            "/api/repos/0/restore",
            &serde_json::json!({"archive": id, "paths": chosen, "target": target}).to_string(),
        )
        .json();
    let done = ui.wait_job(job["id"].as_u64().unwrap());
    assert_eq!(done["exit_status"], 0, "{done}");
    let dir = target.join(src.strip_prefix("/").unwrap());
    let mut got: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(got, ["[x]", "a*"]);
    let tar = ui.ask(
        "GET",
        &format!("/api/repos/0/archives/{id}/tar?path={}", chosen[1]),
        "",
    );
    assert_eq!(tar.status, 200);
    let mut archive = tar::Archive::new(&tar.body[..]);
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with("/a*"), "{names:?}");
}

#[test]
fn ui_runs_a_profile_by_its_file_and_refuses_another_users_link_as_target() {
    let (repo, src) = two_archives();
    let config = repo.dir.path().join("config");
    std::fs::create_dir_all(config.join("cairn")).unwrap();
    // A file name the command line would read as an option, or as a path of its own.
    for name in ["-q.toml", "a.toml.toml"] {
        std::fs::write(
            config.join("cairn").join(name),
            format!(
                "repository = {:?}\n[create]\npaths = [{:?}]\n",
                repo.path.to_str().unwrap(),
                src.to_str().unwrap()
            ),
        )
        .unwrap();
    }
    let ui = Ui::start_with(
        &repo,
        &config,
        &["--listen", "127.0.0.1:0"],
        &[],
        &[("CAIRN_REPO", "")],
    );
    let repos = ui.ask("GET", "/api/repos", "").json();
    let labels: Vec<&str> = repos["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["-q", "a.toml"]);
    for r in 0..2 {
        let job = ui
            .ask("POST", &format!("/api/repos/{r}/backup"), "{}")
            .json();
        let done = ui.wait_job(job["id"].as_u64().unwrap());
        assert_eq!(done["exit_status"], 0, "{done}");
    }
    // A restore target through a link another user made (in a shared /tmp, say).
    let link = repo.dir.path().join("planted");
    std::os::unix::fs::symlink("/", &link).unwrap();
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        &link,
        Some(nix::unistd::Uid::from_raw(65534)),
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    let two = archive_id(&ui, "two");
    let a = ui.ask(
        "POST",
        "/api/repos/0/restore",
        &serde_json::json!({"archive": two, "target": link.join("x"), "overwrite": "always"})
            .to_string(),
    );
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.json()["error"].as_str().unwrap().contains("another user"));
    // The page opened from elsewhere (the file --open opens), with its token.
    let host = ui.host();
    let opened = ui.raw(
        "GET",
        &format!("/?token={}", ui.token),
        &[
            ("Host", &host),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        "",
    );
    assert_eq!(opened.status, 200);
    let fetched = ui.raw(
        "GET",
        &format!("/api/repos?token={}", ui.token),
        &[
            ("Host", &host),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        "",
    );
    assert_eq!(fetched.status, 403);
    let named = format!("localhost:{}", ui.port);
    let a = ui.raw(
        "GET",
        &format!("/?token={}", ui.token),
        &[("Host", &named)],
        "",
    );
    assert_eq!(a.status, 403);
}

#[test]
fn ui_stops_at_a_signal_whatever_a_connection_left_half_sent() {
    let (repo, _) = two_archives();
    let config = repo.dir.path().join("config");
    let mut ui = Ui::start(&repo, &config, &[]);
    // Anyone on this machine may connect, and send half a request.
    let mut half = ui.connect();
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ui.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while ui.alive() {
        assert!(Instant::now() < deadline, "the ui did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(half);
}
