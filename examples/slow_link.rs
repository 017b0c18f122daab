//! A far link between this machine and a server on it, for benchmarks of remote stores: a
//! TCP relay whose every byte waits for its turn on a link of a given rate, shared by all
//! connections in each direction, and then for the link's one-way delay.
//!
//! ```text
//! slow_link LISTEN_PORT TARGET_PORT ONE_WAY_MS MBIT_PER_S [COUNTS_FILE]
//! ```
//! Listens on 127.0.0.1:LISTEN_PORT (0: a free port), relays to 127.0.0.1:TARGET_PORT, prints
//! the port it listens on, and runs until killed. `slow_link 0 9000 5 400` is a 400 Mbit/s
//! link with a 10 ms round trip. Bytes are read from each side only as fast as the link
//! takes them (what waits, waits in the sender's socket buffer, as at a bottleneck), in
//! pieces of at most 16 KiB, so that connections share the link fairly. With COUNTS_FILE, the
//! bytes carried so far each way ("UP DOWN") are written there every 50 ms.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Largest piece read at once: 0.33 ms of a 400 Mbit/s link.
const PIECE: usize = 16 << 10;

/// How far ahead of the link a side may be read: the bottleneck's queue.
const AHEAD: Duration = Duration::from_millis(2);

/// One direction of the link: when it is next free, its rate and its delay, and the bytes
/// it carried.
struct Link {
    free_at: Mutex<Instant>,
    bytes_per_sec: f64,
    delay: Duration,
    carried: AtomicU64,
}

impl Link {
    /// When a piece of `n` bytes that is ready now has crossed: it leaves once the link has
    /// sent what came before it, and arrives `delay` after its last byte left.
    fn cross(&self, n: usize) -> (Instant, Instant) {
        let mut free = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*free).max(Instant::now());
        let sent = start + Duration::from_secs_f64(n as f64 / self.bytes_per_sec);
        *free = sent;
        (sent, sent + self.delay)
    }
}

/// Relays `from` to `to` over `link`.
fn pump(mut from: TcpStream, mut to: TcpStream, link: Arc<Link>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = thread::spawn(move || {
        for (due, data) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if data.is_empty() || to.write_all(&data).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; PIECE];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        if n == 0 {
            let _ = tx.send((Instant::now() + link.delay, Vec::new()));
            break;
        }
        let (sent, due) = link.cross(n);
        link.carried.fetch_add(n as u64, Ordering::Relaxed);
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
        // Read on only while the link is at most AHEAD from taking what was read (sleeping
        // for each piece overslept by a quarter of the link's time).
        let now = Instant::now();
        if sent > now + AHEAD {
            thread::sleep(sent - now - AHEAD);
        }
    }
    let _ = writer.join();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 && args.len() != 6 {
        eprintln!("usage: slow_link LISTEN_PORT TARGET_PORT ONE_WAY_MS MBIT_PER_S [COUNTS_FILE]");
        std::process::exit(2);
    }
    let num = |i: usize| -> f64 {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("slow_link: not a number: {}", args[i]);
            std::process::exit(2)
        })
    };
    let (listen, target, delay_ms, mbit) = (num(1) as u16, num(2) as u16, num(3), num(4));
    let link = |_| {
        Arc::new(Link {
            free_at: Mutex::new(Instant::now()),
            bytes_per_sec: mbit * 1e6 / 8.0,
            delay: Duration::from_secs_f64(delay_ms / 1e3),
            carried: AtomicU64::new(0),
        })
    };
    let (up, down) = (link(0), link(1));
    if let Some(path) = args.get(5) {
        let (up, down, path) = (Arc::clone(&up), Arc::clone(&down), path.clone());
        thread::spawn(move || loop {
            let (u, d) = (
                up.carried.load(Ordering::Relaxed),
                down.carried.load(Ordering::Relaxed),
            );
            let _ = std::fs::write(&path, format!("{u} {d}\n"));
            thread::sleep(Duration::from_millis(50));
        });
    }
    let listener = TcpListener::bind(("127.0.0.1", listen)).expect("listen");
    println!("{}", listener.local_addr().expect("address").port());
    let _ = std::io::stdout().flush();
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let (up, down) = (Arc::clone(&up), Arc::clone(&down));
        thread::spawn(move || {
            // A connection is set up after one round trip.
            thread::sleep(up.delay + down.delay);
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            thread::spawn(move || pump(s2, c2, down));
            pump(client, server, up);
        });
    }
}
