//! Replays the inputs kept in fuzz/regressions/<target>/ through the fuzzers' entry points:
//! valid objects of the current format (`cargo run --example fuzz_seeds -- DIR` makes them;
//! they reach past authentication into the decoders) and any input a fuzzer once crashed on.
//! None may panic, and a target without inputs fails: a replay of nothing proves nothing.

use std::path::Path;

/// A fuzz entry point.
type Harness = fn(&[u8]);

fn replay(dir: &Path, f: Harness) -> usize {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (the inputs to replay)", dir.display()));
    let mut n = 0;
    for e in entries {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        f(&data);
        n += 1;
    }
    n
}

#[test]
fn saved_crashers_and_edge_inputs_do_not_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let targets: [(&str, Harness); 5] = [
        ("pack_toc", cairn::fuzzing::pack_toc),
        ("blob_open", cairn::fuzzing::blob_open),
        ("index_fragment", cairn::fuzzing::index_fragment),
        ("archive", cairn::fuzzing::archive),
        ("key_and_config", cairn::fuzzing::key_and_config),
    ];
    let mut replayed = 0;
    for (name, f) in targets {
        let n = replay(&root.join(name), f);
        assert!(n > 0, "no saved inputs for {name}");
        replayed += n;
        // Edge inputs every decoder must survive.
        for input in [
            &b""[..],
            &[0u8; 1],
            &[0xff; 100],
            b"CAIRNPK\x01",
            b"CAIRNPK\x02",
            b"CAIRNPK\x02\xff\xff\xff\xff",
            b"CAIRNPK\x03",
            b"CAIRNPK\x03\xff\xff\xff\xff",
            b"CAIRNTOC",
            b"CAIRNIDX",
            b"CAIRNIX\x02",
            b"CAIRNIX\x03",
            b"CAIRNARC",
            b"CAIRNAR\x02",
            b"CAIRNAR\x03",
            b"{}",
        ] {
            f(input);
        }
    }
    eprintln!("fuzz regressions: {replayed} saved inputs replayed");
}
