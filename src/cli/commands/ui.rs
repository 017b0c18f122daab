//! `cairn ui [--listen ADDRESS:PORT] [--open]`: the web interface ([`crate::ui`]). Opens each
//! repository (asking for passphrases here, on the terminal), then serves until interrupted.

use std::sync::Arc;
use std::time::Duration;

use crate::cli::args::{Cli, UiArgs};
use crate::cli::commands::Status;
use crate::cli::output;
use crate::cli::settings::Settings;
use crate::error::{Error, Result};
use crate::ui::guard::Guard;
use crate::ui::jobs::Jobs;
use crate::ui::repos::{self, UiRepo};
use crate::ui::server::{self, Ui};

pub fn run(cli: &Cli, settings: &Settings, wait: Duration, args: &UiArgs) -> Result<Status> {
    let ip = args.listen.ip();
    if ip.is_unspecified() {
        return Err(Error::invalid(format!(
            "--listen {}: give the one address to listen on (127.0.0.1, or this machine's address on one network), not every address",
            args.listen
        )));
    }
    if !ip.is_loopback() {
        crate::say!(
            "warning: listening on {ip}: every machine that reaches it sees the ui's refusals; only the token keeps them out"
        );
    }
    let configured = repos::configured(cli.repo.as_deref());
    if configured.is_empty() {
        return Err(Error::invalid(
            "no repository to show: give -r REPO, or write a profile (~/.config/cairn/NAME.toml with repository = \"…\")",
        ));
    }
    let mut list = Vec::new();
    for c in configured {
        let repo = UiRepo::open(c, settings, cli.allow_unencrypted, wait);
        if let Some(e) = repo.error() {
            crate::say!("warning: {}: {e}; shown with this error", repo.label);
        }
        list.push(Arc::new(repo));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ui-server")
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::invalid(format!("cannot start the server: {e}")))?;
    let jobs = Arc::new(Jobs::default());
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", args.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", args.listen)))?;
        let guard = Guard::new(addr);
        let url = guard.url();
        let _opened = if args.open { open_browser(&url) } else { None };
        let stop = stop_on_signal(jobs.clone())?;
        jobs.take_records();
        output::line(&format!("cairn ui: open {url}"))?;
        output::line("(Ctrl-C stops it)")?;
        let ui = Arc::new(Ui {
            guard,
            repos: list,
            jobs,
        });
        server::serve(listener, ui, stop)
            .await
            .map_err(|e| Error::invalid(format!("the server stopped: {e}")))
    })?;
    crate::util::log::set_sink(None);
    crate::util::log::set_json(cli.log_json);
    Ok(Status::Ok)
}

/// Resolves at SIGINT, SIGTERM or SIGHUP while no job runs (a job's command stops at the
/// first and the ui at the next).
fn stop_on_signal(jobs: Arc<Jobs>) -> Result<impl std::future::Future<Output = ()>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Error::invalid(format!("cannot install signal handlers: {e}")))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("ui-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                match jobs.running_title() {
                    Some(title) => {
                        eprintln!("cairn ui: interrupting {title}; once more to stop the ui")
                    }
                    None => break,
                }
            }
            let _ = tx.send(());
            // A page waiting for a job's records, or a connection another user left half
            // sent, holds its request open: the ui waits for them a moment, not longer.
            std::thread::sleep(Duration::from_secs(2));
            eprintln!("cairn ui: stopped");
            std::process::exit(0);
        })
        .map_err(|e| Error::invalid(format!("cannot start the server: {e}")))?;
    Ok(async move {
        let _ = rx.await;
    })
}

/// Opens `url` in the desktop's browser through a file only this user can read (an address
/// given to `xdg-open` would show the token to every user in the process list). The file is
/// kept while the ui runs.
fn open_browser(url: &str) -> Option<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("cairn-ui-")
        .suffix(".html")
        .tempfile()
        .ok()?;
    let page = format!(
        "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url={url}\"><a href=\"{url}\">cairn ui</a>"
    );
    f.write_all(page.as_bytes()).ok()?;
    match std::process::Command::new("xdg-open")
        .arg(f.path())
        .stdin(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => Some(f),
        Err(e) => {
            crate::say!("warning: cannot open a browser (xdg-open: {e}); open the address below");
            None
        }
    }
}
