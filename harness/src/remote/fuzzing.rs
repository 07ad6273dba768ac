//! The bodies of the protocol's fuzz targets (`fuzz/fuzz_targets/{frame,session}.rs`), here so
//! that an ordinary test replays their corpus (`fuzz/corpus/`) through the same code.

use super::agent::serve::{serve, Ended, ServeError, ServeOptions};
use super::proto;
use std::path::Path;

/// Reads frames from `data` until it ends or one is bad. Reading never panics, and a frame
/// read writes and reads back as itself.
pub fn frames(data: &[u8]) {
    let mut r = data;
    while let Ok(f) = proto::read_frame(&mut r) {
        let mut b = Vec::new();
        if proto::write_frame(&mut b, &f).is_ok() {
            let back = proto::read_frame(&mut &b[..]);
            assert!(matches!(&back, Ok(g) if *g == f), "{f:?} read back as {back:?}");
        }
    }
}

/// The scratch target a session's agent may open (a session can write all over it), at a
/// fixed path so that the corpus can name it.
pub const SCRATCH: &str = "/tmp/faultline-fuzz-target.img";

/// Serves `data` as a coordinator's bytes to an agent that may open `target` (made by
/// [`scratch_target`]). The coordinator's side ends with `data`, so every long operation sees
/// it gone and stops.
pub fn session(data: &[u8], target: &Path) -> Result<Ended, ServeError> {
    let o = ServeOptions {
        software: "faultline fuzz".into(),
        host: "fuzz".into(),
        pid: 1,
        allow_exec: false,
        targets: vec![target.display().to_string()],
    };
    let mut out = Vec::new();
    serve(std::io::Cursor::new(data.to_vec()), &mut out, &o)
}

/// The scratch target a session may open: a 1 MiB file at [`SCRATCH`], made once.
pub fn scratch_target() -> std::io::Result<std::path::PathBuf> {
    let p = std::path::PathBuf::from(SCRATCH);
    if std::fs::metadata(&p).map(|m| m.len()).ok() != Some(1 << 20) {
        std::fs::write(&p, vec![0u8; 1 << 20])?;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::{Frame, Nonce, Op};

    fn corpus(name: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(name);
        let mut out: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .map(|p| {
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        out.sort();
        out
    }

    /// Every input of the frame target's corpus, replayed.
    #[test]
    fn the_frame_corpus_replays_without_a_panic() {
        let c = corpus("frame");
        assert!(c.len() >= 10, "{} inputs", c.len());
        for (p, b) in c {
            eprintln!("replaying {}", p.display());
            frames(&b);
        }
    }

    /// Every input of the session target's corpus, replayed: each ends with a goodbye, the
    /// coordinator gone, or a refusal, never a panic.
    #[test]
    fn the_session_corpus_replays_without_a_panic() {
        let t = scratch_target().unwrap();
        let c = corpus("session");
        assert!(c.len() >= 10, "{} inputs", c.len());
        for (p, b) in c {
            let r = session(&b, &t);
            eprintln!("{}: {r:?}", p.display());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
        /// Any sequence of the protocol's frames (any kind, in any order, numbered anyhow),
        /// with any bytes after: the agent ends its session with a goodbye, the coordinator
        /// gone, or a refusal, and never panics. The frames held unread never pass the
        /// inbox's bound (`peer::INBOX_FRAMES`: the reader refuses a flood instead).
        #[test]
        fn no_sequence_of_frames_panics_the_agent(
            picks in proptest::collection::vec((0usize..64, 0u64..6), 0..24),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let t = scratch_target().unwrap();
            let every = crate::remote::proto::tests::every_frame();
            let mut b = Vec::new();
            let hello = Frame::Hello { versions: vec![6], run: Nonce::from_words(1, 2), coordinator: "c".into() };
            proto::write_frame(&mut b, &hello).unwrap();
            for (i, seq) in picks {
                let mut f = every[i % every.len()].clone();
                if let Frame::Request { op: Op::Open { target, .. }, .. } = &mut f {
                    *target = SCRATCH.into();
                }
                if let Frame::Request { seq: s, .. } = &mut f {
                    *s = seq;
                }
                proto::write_frame(&mut b, &f).unwrap();
            }
            b.extend_from_slice(&tail);
            let _ = session(&b, &t);
        }
    }

    /// The seed corpus: each frame alone (frame), and a hello then each request (session).
    /// Writes `fuzz/corpus/` when FAULTLINE_WRITE_SEEDS is set; otherwise checks nothing.
    #[test]
    fn seed_corpus() {
        if std::env::var_os("FAULTLINE_WRITE_SEEDS").is_none() {
            return;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let run = Nonce::from_words(1, 2);
        let hello = Frame::Hello { versions: vec![6], run: run.clone(), coordinator: "c".into() };
        let bytes = |fs: &[Frame]| {
            let mut b = Vec::new();
            for f in fs {
                proto::write_frame(&mut b, f).unwrap();
            }
            b
        };
        std::fs::create_dir_all(root.join("frame")).unwrap();
        std::fs::create_dir_all(root.join("session")).unwrap();
        let every = crate::remote::proto::tests::every_frame();
        for (i, f) in every.iter().enumerate() {
            std::fs::write(root.join("frame").join(format!("seed-{i:02}")), bytes(std::slice::from_ref(f))).unwrap();
        }
        let open = |seq| Frame::Request {
            run: run.clone(),
            seq,
            op: Op::Open { target: SCRATCH.into(), identity: None, expect: Default::default(), queue_depth: 4, resets: Vec::new() },
        };
        for (i, f) in every.into_iter().enumerate() {
            let Frame::Request { op, .. } = f else { continue };
            let req = Frame::Request { run: run.clone(), seq: 2, op };
            std::fs::write(root.join("session").join(format!("seed-{i:02}")), bytes(&[hello.clone(), open(1), req])).unwrap();
        }
    }
}
