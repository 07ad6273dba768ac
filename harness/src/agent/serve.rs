//! The agent's side (`faultline agent --stdio`): one coordinator per process, over the
//! process's stdin and stdout (an ssh session, a local pipe, a guest's serial port). It
//! answers the handshake, then each typed request of the run it was greeted for, and refuses,
//! saying why in a last frame, anything else: another version, another run's frame, an
//! oversized or malformed frame, a request out of order.

use super::proto::{self, Answer, Frame, FrameError, Nonce, Op};
use std::io::{Read, Write};

/// What the agent says of itself.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub software: String,
    pub host: String,
    pub pid: u32,
    pub allow_exec: bool,
}

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The coordinator said goodbye.
    Bye,
    /// The coordinator's side of the stream closed (it died, or the transport did).
    Closed,
}

/// Why the agent refused to go on (it sent the coordinator a `refused` frame saying so).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refused the coordinator: {0}")]
    Refused(String),
    #[error("the session failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves one coordinator on `r`/`w` until it says goodbye or goes away.
pub fn serve(r: &mut impl Read, w: &mut impl Write, o: &ServeOptions) -> Result<Ended, ServeError> {
    let ours = proto::VERSIONS.to_vec();
    let refuse = |w: &mut dyn Write, why: String, theirs: Vec<u32>| -> ServeError {
        let mut w = w;
        let _ = proto::write_frame(&mut w, &Frame::Refused { why: why.clone(), ours: proto::VERSIONS.to_vec(), theirs });
        ServeError::Refused(why)
    };
    let (run, coordinator) = match proto::read_frame(r) {
        Ok(Frame::Hello { versions, run, coordinator }) => match proto::choose(&versions) {
            Some(v) => {
                let agent = proto::AgentInfo { software: o.software.clone(), host: o.host.clone(), pid: o.pid, allow_exec: o.allow_exec };
                proto::write_frame(w, &Frame::Welcome { version: v, agent })?;
                (run, coordinator)
            }
            None => {
                let why = format!("this agent speaks protocol version(s) {ours:?}; coordinator {coordinator} offered {versions:?}");
                return Err(refuse(w, why, versions));
            }
        },
        Ok(other) => return Err(refuse(w, format!("the first frame must be a hello, not {}", kind(&other)), Vec::new())),
        Err(FrameError::Closed) => return Ok(Ended::Closed),
        Err(e) => return Err(refuse(w, format!("before the hello: {e}"), Vec::new())),
    };
    let mut last_seq = 0u64;
    loop {
        let f = match proto::read_frame(r) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Ok(Ended::Closed),
            Err(e) => return Err(refuse(w, e.to_string(), Vec::new())),
        };
        let (seq, op) = match f {
            Frame::Request { run: r2, .. } if r2 != run => {
                let why = format!("a frame of run {r2}; this agent serves run {run} (of coordinator {coordinator}), and no other");
                return Err(refuse(w, why, Vec::new()));
            }
            Frame::Request { seq, .. } if seq <= last_seq => {
                return Err(refuse(w, format!("request {seq} after request {last_seq}: requests are numbered upwards"), Vec::new()));
            }
            Frame::Request { seq, op, .. } => (seq, op),
            Frame::Hello { coordinator: c2, run: r2, .. } => {
                let why = format!("a second hello (coordinator {c2}, run {r2}): this agent serves coordinator {coordinator}, run {run}");
                return Err(refuse(w, why, Vec::new()));
            }
            other => return Err(refuse(w, format!("a {} frame, which a coordinator does not send", kind(&other)), Vec::new())),
        };
        last_seq = seq;
        let (result, end) = answer(&op);
        proto::write_frame(w, &Frame::Reply { run: run.clone(), seq, result })?;
        if end {
            return Ok(Ended::Bye);
        }
    }
}

/// The answer to one operation, and whether the session ends after it.
fn answer(op: &Op) -> (Answer, bool) {
    match op {
        Op::Clock => (Answer::Clock { monotonic_ns: faultline_drivers::monotonic_ns() }, false),
        Op::Bye => (Answer::Bye, true),
    }
}

fn kind(f: &Frame) -> &'static str {
    match f {
        Frame::Hello { .. } => "hello",
        Frame::Welcome { .. } => "welcome",
        Frame::Refused { .. } => "refused",
        Frame::Request { .. } => "request",
        Frame::Reply { .. } => "reply",
    }
}

/// The nonce a frame carries, for a peer's log.
pub fn run_of(f: &Frame) -> Option<&Nonce> {
    match f {
        Frame::Hello { run, .. } | Frame::Request { run, .. } | Frame::Reply { run, .. } => Some(run),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ServeOptions {
        ServeOptions { software: "faultline test".into(), host: "here".into(), pid: 1, allow_exec: false }
    }

    fn frames(fs: &[Frame]) -> Vec<u8> {
        let mut b = Vec::new();
        for f in fs {
            proto::write_frame(&mut b, f).unwrap();
        }
        b
    }

    fn replies(out: &[u8]) -> Vec<Frame> {
        let mut r = out;
        let mut v = Vec::new();
        while let Ok(f) = proto::read_frame(&mut r) {
            v.push(f);
        }
        v
    }

    fn hello(versions: Vec<u32>) -> Frame {
        Frame::Hello { versions, run: Nonce::from_words(1, 1), coordinator: "c1".into() }
    }

    fn req(run: Nonce, seq: u64, op: Op) -> Frame {
        Frame::Request { run, seq, op }
    }

    #[test]
    fn a_session_answers_in_order_and_ends_at_bye() {
        let run = Nonce::from_words(1, 1);
        let input = frames(&[hello(vec![1]), req(run.clone(), 1, Op::Clock), req(run.clone(), 2, Op::Bye)]);
        let mut out = Vec::new();
        assert_eq!(serve(&mut &input[..], &mut out, &opts()).unwrap(), Ended::Bye);
        let r = replies(&out);
        assert!(matches!(&r[0], Frame::Welcome { version: 1, agent } if agent.host == "here"));
        assert!(matches!(&r[1], Frame::Reply { seq: 1, result: Answer::Clock { monotonic_ns }, .. } if *monotonic_ns > 0));
        assert!(matches!(&r[2], Frame::Reply { seq: 2, result: Answer::Bye, .. }));
    }

    #[test]
    fn refusals_say_why_in_a_last_frame() {
        let run = Nonce::from_words(1, 1);
        let other = Nonce::from_words(2, 2);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (frames(&[hello(vec![7, 8])]), "speaks protocol version(s) [1]; coordinator c1 offered [7, 8]"),
            (frames(&[req(run.clone(), 1, Op::Clock)]), "the first frame must be a hello"),
            (frames(&[hello(vec![1]), req(other, 1, Op::Clock)]), "this agent serves run 00000000000000010000000000000001"),
            (frames(&[hello(vec![1]), req(run.clone(), 2, Op::Clock), req(run.clone(), 2, Op::Clock)]), "numbered upwards"),
            (frames(&[hello(vec![1]), hello(vec![1])]), "a second hello"),
            ([frames(&[hello(vec![1])]), (proto::MAX_FRAME + 1).to_be_bytes().to_vec()].concat(), "at most"),
        ];
        for (input, says) in cases {
            let mut out = Vec::new();
            let e = serve(&mut &input[..], &mut out, &opts()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            match replies(&out).last() {
                Some(Frame::Refused { why, ours, .. }) => assert!(why.contains(says) && ours == &vec![1], "{why}"),
                other => panic!("no refused frame last: {other:?}"),
            }
        }
        // A refused version names both sides'.
        let mut out = Vec::new();
        let _ = serve(&mut &frames(&[hello(vec![7])])[..], &mut out, &opts());
        assert!(matches!(replies(&out).last(), Some(Frame::Refused { theirs, .. }) if theirs == &vec![7]));
        // A coordinator that goes away ends the session quietly.
        assert_eq!(serve(&mut &frames(&[hello(vec![1])])[..], &mut Vec::new(), &opts()).unwrap(), Ended::Closed);
    }
}
