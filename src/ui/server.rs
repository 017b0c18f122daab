//! The routes of `cairn ui` (axum on a small tokio runtime). The work itself runs on threads
//! of its own: the core is blocking, and a remote store runs a runtime of its own that must
//! not be started from inside this one.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::Error;
use crate::ui::guard::{self, Guard};
use crate::ui::jobs::Jobs;
use crate::ui::repos::UiRepo;
use crate::ui::{assets, browse, download};

/// What every request shares.
pub struct Ui {
    pub guard: Guard,
    pub repos: Vec<Arc<UiRepo>>,
    pub jobs: Arc<Jobs>,
}

type Shared = Arc<Ui>;

/// A failed request: its status and what the page shows.
pub struct Failed(StatusCode, String);

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::Invalid(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failed(status, e.to_string())
    }
}

fn bad(message: impl Into<String>) -> Failed {
    Failed(StatusCode::BAD_REQUEST, message.into())
}

type Answer = Result<Json<Value>, Failed>;

/// Runs `f` on a thread of its own and waits for it without holding up the server.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failed> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("ui-request".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| Failed(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    rx.await.map_err(|_| {
        Failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request's work stopped".into(),
        )
    })
}

/// The app: every route behind the guard.
pub fn app(ui: Shared) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/app.css", get(style))
        .route("/api/repos", get(repos))
        .route("/api/repos/{r}/archives", get(archives))
        .route("/api/repos/{r}/archives/{id}/tree", get(tree))
        .route("/api/repos/{r}/archives/{id}/tar", get(tar))
        .route("/api/repos/{r}/find", get(find))
        .route("/api/repos/{r}/diff", get(diff))
        .route("/api/repos/{r}/restore", post(restore))
        .route("/api/repos/{r}/backup", post(backup))
        .route("/api/repos/{r}/check", post(check))
        .route("/api/jobs", get(jobs))
        .route("/api/jobs/{id}", get(job))
        .layer(axum::middleware::from_fn_with_state(ui.clone(), guarded))
        .with_state(ui)
}

/// The guard, and the headers every answer carries: no framing, no caching, no referrer
/// (the token is in the address), only the page's own script.
async fn guarded(State(ui): State<Shared>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let checked = if h.contains_key("service-worker") {
        // No script of this origin runs beyond its page.
        Err(guard::Refused("no service worker is served here"))
    } else {
        ui.guard.check(&guard::Request {
            writes: req.method() != Method::GET && req.method() != Method::HEAD,
            opens_page: req.method() == Method::GET
                && req.uri().path() == "/"
                && text("sec-fetch-mode") == Some("navigate"),
            host: text("host"),
            origin: text("origin"),
            fetch_site: text("sec-fetch-site"),
            header_token: text("x-cairn-token"),
            query: req.uri().query(),
        })
    };
    let page = req.uri().path() == "/";
    let mut response = match checked {
        Ok(()) => as_json(next.run(req).await).await,
        Err(guard::Refused(why)) => Failed(StatusCode::FORBIDDEN, why.to_string()).into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if page {
        // Whatever a page served earlier on this address left (a service worker that would
        // see the next address with its token) is removed.
        headers.insert(
            "clear-site-data",
            HeaderValue::from_static("\"cache\", \"storage\""),
        );
    }
    response
}

/// A refusal by axum itself (a parameter that does not parse, a body that is not JSON) as
/// the page reads every error: `{"error": …}`.
async fn as_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    let text = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_string()
    } else {
        text
    };
    Failed(status, text).into_response()
}

async fn page(State(ui): State<Shared>) -> Response {
    let html = assets::PAGE.replace("{{TOKEN}}", ui.guard.token());
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        assets::SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        assets::STYLE,
    )
        .into_response()
}

/// Repository `r` of the list.
fn repo(ui: &Ui, r: usize) -> Result<Arc<UiRepo>, Failed> {
    ui.repos
        .get(r)
        .cloned()
        .ok_or_else(|| Failed(StatusCode::NOT_FOUND, format!("no repository {r}")))
}

async fn repos(State(ui): State<Shared>) -> Answer {
    let list: Vec<Value> = ui
        .repos
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "number": i,
                "label": r.label,
                "location": r.location,
                "profile": r.profile,
                "can_back_up": r.can_back_up,
                "error": r.error(),
                "last_backup_job": ui.jobs.last_ended(i, "backup"),
                "last_check_job": ui.jobs.last_ended(i, "check"),
            })
        })
        .collect();
    Ok(Json(json!({ "repos": list })))
}

async fn archives(State(ui): State<Shared>, Path(r): Path<usize>) -> Answer {
    let repo = repo(&ui, r)?;
    let v = blocking(move || repo.read(browse::archives)).await??;
    Ok(Json(v))
}

#[derive(Deserialize)]
struct TreeQuery {
    #[serde(default)]
    path: String,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

async fn tree(
    State(ui): State<Shared>,
    Path((r, id)): Path<(usize, String)>,
    Query(q): Query<TreeQuery>,
) -> Answer {
    let repo = repo(&ui, r)?;
    let path = browse::path_of_key(&q.path)?;
    let v = blocking(move || -> crate::error::Result<Value> {
        let aid = repo.read(|rp| browse::select(rp, &id))?.0;
        let tree = repo.tree(aid, |rp| {
            let (_, meta) = browse::select(rp, &id)?;
            browse::build_tree(rp, &meta)
        })?;
        browse::directory(&tree, &path, q.offset, q.limit.unwrap_or(1000))
    })
    .await??;
    Ok(Json(v))
}

#[derive(Deserialize)]
struct FindQuery {
    pattern: String,
    limit: Option<usize>,
}

async fn find(
    State(ui): State<Shared>,
    Path(r): Path<usize>,
    Query(q): Query<FindQuery>,
) -> Answer {
    let repo = repo(&ui, r)?;
    let limit = q.limit.unwrap_or(500).min(5000);
    let v = blocking(move || repo.read(|rp| browse::find(rp, &q.pattern, limit))).await??;
    Ok(Json(v))
}

#[derive(Deserialize)]
struct DiffQuery {
    a: String,
    b: String,
}

async fn diff(
    State(ui): State<Shared>,
    Path(r): Path<usize>,
    Query(q): Query<DiffQuery>,
) -> Answer {
    let repo = repo(&ui, r)?;
    let v = blocking(move || repo.read(|rp| browse::diff(rp, &q.a, &q.b, 5000))).await??;
    Ok(Json(v))
}

/// A tar of one path of an archive ([`download`]).
async fn tar(
    State(ui): State<Shared>,
    Path((r, id)): Path<(usize, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, Failed> {
    let repo = repo(&ui, r)?;
    let key = q.get("path").cloned().unwrap_or_default();
    let path = browse::path_of_key(&key)?;
    if path.is_empty() {
        return Err(bad("choose a file or a directory to download"));
    }
    let name = download::file_name(&path);
    let (file, len) = blocking(move || download::spool(&repo, &id, &path)).await??;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
    std::thread::Builder::new()
        .name("ui-download".into())
        .spawn(move || {
            use std::io::Read;
            let mut file = file;
            loop {
                let mut buf = vec![0u8; 1 << 18];
                let sent = match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        buf.truncate(n);
                        tx.blocking_send(Ok(buf))
                    }
                    Err(e) => tx.blocking_send(Err(e)),
                };
                if sent.is_err() {
                    return;
                }
            }
        })
        .map_err(|e| Failed(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_string()),
            (header::CONTENT_LENGTH, len.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// The start of a command line for repository `repo`: its location, and its profile.
fn command_line(repo: &UiRepo) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["cairn".into(), "--log-json".into()];
    // The profile's file, by its whole path: its name alone is looked up again, and a name
    // such as `a.toml` (of a.toml.toml) would be taken for a path in the current directory.
    if let Some(p) = &repo.profile_path {
        let mut opt = OsString::from("--profile=");
        opt.push(p.as_os_str());
        argv.push(opt);
    }
    // The location the page shows, whatever CAIRN_REPO says.
    argv.extend(["-r".into(), repo.location.clone().into()]);
    argv
}

#[derive(Deserialize)]
struct RestoreRequest {
    archive: String,
    /// Keys (hex) of the paths; none: the whole archive.
    #[serde(default)]
    paths: Vec<String>,
    target: String,
    #[serde(default = "never")]
    overwrite: String,
}

fn never() -> String {
    "never".into()
}

async fn restore(
    State(ui): State<Shared>,
    Path(r): Path<usize>,
    Json(q): Json<RestoreRequest>,
) -> Answer {
    let repo = repo(&ui, r)?;
    if !["never", "if-changed", "always"].contains(&q.overwrite.as_str()) {
        return Err(bad("overwrite is never, if-changed or always"));
    }
    if q.archive.len() != 64 || !q.archive.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("an archive is named by its whole id"));
    }
    let target = target_dir(&q.target)?;
    let mut argv = command_line(&repo);
    argv.extend([
        "extract".into(),
        "--overwrite".into(),
        q.overwrite.clone().into(),
        "--target".into(),
        target.clone().into_os_string(),
        "--".into(),
        format!("aid:{}", q.archive).into(),
    ]);
    use std::os::unix::ffi::OsStringExt;
    for key in &q.paths {
        let path = browse::path_of_key(key)?;
        if path.is_empty() {
            return Err(bad("an empty path"));
        }
        argv.push(OsString::from_vec(browse::literal(&path)));
    }
    let title = format!("restore to {}", target.display());
    start(&ui, r, &repo, "restore", title, argv)
}

/// Starts job `kind` on repository `r`: what it is, or why not (another runs).
fn start(
    ui: &Ui,
    r: usize,
    repo: &Arc<UiRepo>,
    kind: &'static str,
    title: String,
    argv: Vec<OsString>,
) -> Answer {
    let job = ui
        .jobs
        .start(r, repo, kind, title, argv)
        .map_err(|e| Failed(StatusCode::CONFLICT, e))?;
    Ok(Json(job.about()))
}

/// The directory to restore into: absolute (or `~/…`), as typed; not through a symbolic link
/// another user made (`/tmp/restore` planted as a link to `/`). What extract refuses (the
/// repository, cairn's cache, links planted inside the target) it refuses itself.
fn target_dir(given: &str) -> Result<PathBuf, Failed> {
    let given = given.trim();
    let path = match given.strip_prefix("~/") {
        Some(rest) => {
            PathBuf::from(std::env::var_os("HOME").ok_or_else(|| bad("HOME is not set"))?)
                .join(rest)
        }
        None => PathBuf::from(given),
    };
    if !path.is_absolute() {
        return Err(bad(
            "give the directory to restore into as a whole path (/home/alice/restored or ~/restored)",
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    let mut at = PathBuf::new();
    for part in path.components() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            break;
        };
        use std::os::unix::fs::MetadataExt;
        if meta.file_type().is_symlink() && meta.uid() != me && meta.uid() != 0 {
            return Err(bad(format!(
                "{} is a symbolic link another user (uid {}) made: refusing to restore through it",
                at.display(),
                meta.uid()
            )));
        }
    }
    Ok(path)
}

async fn backup(State(ui): State<Shared>, Path(r): Path<usize>) -> Answer {
    let repo = repo(&ui, r)?;
    let Some(profile) = repo.profile.clone().filter(|_| repo.can_back_up) else {
        return Err(bad(
            "back up now runs a profile's create: this repository has no profile with [create] paths",
        ));
    };
    let name = format!(
        "{profile}-{}",
        chrono::Local::now().format("%Y-%m-%dT%H:%M:%S")
    );
    let mut argv = command_line(&repo);
    argv.extend(["create".into(), "--".into(), name.clone().into()]);
    start(
        &ui,
        r,
        &repo,
        "backup",
        format!("back up {profile} as {name}"),
        argv,
    )
}

#[derive(Deserialize, Default)]
struct CheckRequest {
    #[serde(default)]
    verify_data: bool,
}

async fn check(
    State(ui): State<Shared>,
    Path(r): Path<usize>,
    Json(q): Json<CheckRequest>,
) -> Answer {
    let repo = repo(&ui, r)?;
    let mut argv = command_line(&repo);
    argv.push("check".into());
    if q.verify_data {
        argv.push("--verify-data".into());
    }
    let title = format!("check {}", repo.label);
    start(&ui, r, &repo, "check", title, argv)
}

async fn jobs(State(ui): State<Shared>) -> Answer {
    Ok(Json(json!({ "jobs": ui.jobs.list() })))
}

#[derive(Deserialize)]
struct JobQuery {
    #[serde(default)]
    from: usize,
    /// Seconds to wait for a record (long polling), at most 20.
    #[serde(default)]
    wait: u64,
}

async fn job(State(ui): State<Shared>, Path(id): Path<u64>, Query(q): Query<JobQuery>) -> Answer {
    let job = ui
        .jobs
        .get(id)
        .ok_or_else(|| Failed(StatusCode::NOT_FOUND, format!("no job {id}")))?;
    let wait = Duration::from_secs(q.wait.min(20));
    let v = blocking(move || job.since(q.from, wait)).await?;
    Ok(Json(v))
}

/// Serves `ui` on `listener` until `stop` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ui: Shared,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(ui))
        .with_graceful_shutdown(stop)
        .await
}
