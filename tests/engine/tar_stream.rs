//! `export-tar`'s stream in process: the items are read on a thread of their own, a batch
//! ahead of the entries being written. An error reading them ends the stream after the items
//! before it; an output that fails stops the reading.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn::archive::content::Contents;
use cairn::error::{Error, Result};
use cairn::format::item::{Item, ItemKind};
use cairn::index::ChunkIndex;
use cairn::ops::extract::Selection;
use cairn::ops::tar::write_selected;
use cairn::repo::Repository;
use cairn::store::mem::MemStore;

fn repo() -> Repository {
    std::env::set_var("CAIRN_TEST_CHEAP_KDF", "1");
    Repository::init(
        Arc::new(MemStore::new()),
        &cairn::repo::InitOptions::default(),
        || Ok(b"pw".to_vec()),
    )
    .unwrap()
}

fn dir(name: &str) -> Result<Item> {
    Ok(Item::new(ItemKind::Dir, name.as_bytes().to_vec()))
}

/// The names of the entries in `stream` (a whole or a cut tar stream).
fn names(stream: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 512 <= stream.len() && stream[at] != 0 {
        let header = &stream[at..at + 512];
        let name = &header[..header.iter().position(|b| *b == 0).unwrap_or(100)];
        out.push(String::from_utf8_lossy(name).into_owned());
        at += 512; // directories have no contents
    }
    out
}

#[test]
fn an_error_reading_items_ends_the_stream_after_the_items_before_it() {
    let repo = repo();
    let index = ChunkIndex::new();
    let mut items: Vec<Result<Item>> = (0..5000).map(|i| dir(&format!("d{i}"))).collect();
    items.insert(4500, Err(Error::corrupt("the item stream", "damaged here")));
    let mut out = Vec::new();
    let got = write_selected(
        Contents::new(&repo, &index).with_threads(2),
        items.into_iter(),
        Selection::default(),
        &mut out,
        "memory",
    );
    let e = got.err().expect("the error is returned");
    assert!(e.to_string().contains("damaged here"), "{e}");
    let names = names(&out);
    assert_eq!(
        names.len(),
        4500,
        "every item before the error, and none after it"
    );
    assert_eq!(names[4499], "d4499/");
}

/// An output that fails (a closed pipe, a full disk) stops the reading of the items: the
/// thread that reads them is not left reading the whole archive, nor waiting for ever.
#[test]
fn a_failing_output_stops_the_reading() {
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
    }
    let repo = repo();
    let index = ChunkIndex::new();
    let read = AtomicUsize::new(0);
    let total = 2_000_000;
    let items = (0..total).map(|i| {
        read.fetch_add(1, Ordering::Relaxed);
        dir(&format!("d{i}"))
    });
    // Entries of 512 bytes each: the 1 MiB buffer fills after 2,048 of them.
    let got = write_selected(
        Contents::new(&repo, &index).with_threads(2),
        items,
        Selection::default(),
        Broken,
        "the pipe",
    );
    let e = got.err().expect("the output's error is returned");
    assert!(e.to_string().contains("the pipe"), "{e}");
    let read = read.load(Ordering::Relaxed);
    assert!(
        read < 100_000,
        "{read} of {total} items read after the output failed"
    );
}

/// An output that takes every write but fails when flushed (stdout keeps what follows its
/// last newline until it is flushed; a file's buffer, until it is dropped): the export fails,
/// rather than ending with its last blocks lost.
#[test]
fn an_output_that_fails_at_its_end_fails_the_export() {
    struct FailsAtFlush(usize);
    impl std::io::Write for FailsAtFlush {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
        }
    }
    let repo = repo();
    let index = ChunkIndex::new();
    let got = write_selected(
        Contents::new(&repo, &index),
        (0..10).map(|i| dir(&format!("d{i}"))),
        Selection::default(),
        FailsAtFlush(0),
        "the file",
    );
    let e = got.err().expect("the flush's error is returned");
    assert!(e.to_string().contains("the file"), "{e}");
}
