//! `faultline decode`: who wrote these sectors.

use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use clap::Parser;
use faultline::format::{read_header, Decoded, Format, MAGIC};
use std::path::PathBuf;

#[derive(Parser)]
pub struct DecodeArgs {
    /// A target or a dump file.
    #[arg(long)]
    target: PathBuf,
    #[arg(long, default_value_t = 0)]
    offset: u64,
    #[arg(long, default_value_t = 4096)]
    length: u64,
    /// Sector size of the dump.
    #[arg(long, default_value_t = 512)]
    sector_bytes: u64,
    /// One line per sector instead of one per run of sectors from the same write.
    #[arg(long)]
    each: bool,
}

pub fn cmd_decode(a: DecodeArgs) -> Result<Exit> {
    let s = a.sector_bytes;
    if s < 512 || !s.is_power_of_two() || !a.offset.is_multiple_of(s) || !a.length.is_multiple_of(s) {
        bail!("--offset {} and --length {} must be multiples of --sector-bytes {s} (a power of two, at least 512)", a.offset, a.length);
    }
    let file = std::fs::File::open(&a.target).with_context(|| format!("cannot open {}", a.target.display()))?;
    let mut buf = vec![0u8; a.length as usize];
    let n = read_up_to(&file, &mut buf, a.offset)?;
    if n < buf.len() {
        eprintln!("faultline: note: {} ends at byte {}; decoding {} bytes", a.target.display(), a.offset + n as u64, n - n % s as usize);
    }
    let mut last: Option<(String, u64, u64)> = None; // (key, first offset, sectors)
    let flush = |l: &Option<(String, u64, u64)>| {
        if let Some((k, off, n)) = l {
            println!("{off:>14} +{:<8} {k}", n * s);
        }
    };
    for (i, sec) in buf[..n - n % s as usize].chunks(s as usize).enumerate() {
        let off = a.offset + i as u64 * s;
        let id = read_header(sec);
        let text = if sec[..8] == MAGIC {
            let valid = matches!(Format::new(id.run_id, s as usize).decode(sec), Decoded::Valid(_));
            let addr_note = if id.addr == off { String::new() } else { format!(" MISPLACED(own address {})", id.addr) };
            let what = if id.write_id == 0 { "prefill".to_string() } else { format!("write {}", id.write_id) };
            (
                format!(
                    "run {:016x} {what} cycle {} port {} sectors of {}{}{}",
                    id.run_id,
                    id.cycle,
                    id.port,
                    id.count,
                    if valid { "" } else { " CHECKSUM-FAIL" },
                    addr_note
                ),
                Some(id.index),
            )
        } else if sec.iter().all(|&b| b == 0) {
            ("zeros".to_string(), None)
        } else {
            ("not a faultline sector".to_string(), None)
        };
        let key = text.0.clone();
        if a.each {
            println!("{off:>14} +{s:<8} {}{}", key, text.1.map_or(String::new(), |i| format!(" (sector {i})")));
            continue;
        }
        match &mut last {
            Some((k, _, cnt)) if *k == key => *cnt += 1,
            _ => {
                flush(&last);
                last = Some((key, off, 1));
            }
        }
    }
    flush(&last);
    Ok(Exit::Clean)
}

fn read_up_to(f: &std::fs::File, buf: &mut [u8], offset: u64) -> Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}
