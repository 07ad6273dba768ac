//! The trim-mix workload of `faultline bench` (`--workloads trimwrite`): 4 KiB random writes
//! at QD32 of which a tenth of the operations deallocate (trim) their extent instead.
//!
//! faultline runs one cycle whose [`OpMix`] deallocates 100,000 ids in a million (each id's
//! kind a seeded draw of (seed, id)); its operations are its completions, writes and
//! deallocates alike, and its bytes `bytes_written`, which counts a deallocated extent as fio
//! counts trimmed bytes. fio runs two jobs in one flow group, a randwrite job weighted 9 and a
//! randtrim job weighted 1 (`--flow_id=1`, `--flow=9` and `--flow=1`: fio keeps the jobs'
//! I/Os in that proportion; 79,561 writes and 8,839 trims in 3 s on a loop device), at QD16
//! each, 32 in all, and its group's writes and trims are summed. `--flow_sleep=100`: with
//! fio's default of 0, a job ahead of its share spins, which on 2 CPUs took the loop device's
//! worker's CPU (fio's CPU per GB 70-90 s against ~1 for plain randwrite; in a paired run the
//! sleep raised fio's trim mix from ~25k to 34-37k IOPS), so the ratio measured fio's spinning. In the crc32c run the write
//! job tags its blocks, as the randwrite row's does.
//!
//! Not every target takes a trim. fio trims through io_uring with the BLKDISCARD ioctl, which a
//! regular file refuses (ENOTTY, fio's job error 25), while faultline deallocates a file's
//! extent by punching a hole: on a file, fio's columns are n/a. On a target that carries no
//! deallocate at all ([`faultline_drivers::BlockTarget::zeroing`]) faultline's writer would refuse the run, and
//! neither side runs. Each n/a comes with a note saying why, printed under the table.

use super::{fio_job, fio_run, fl_cycle, open, s, settle, spec, Ctx, Fig};
use anyhow::Result;
use faultline::workload::{OpMix, Pattern};
use faultline_drivers::Opened;
use std::path::Path;

/// The row's name in the printed table.
pub(super) const ROW: &str = "4k randwrite + 10% trim qd32";
/// faultline's share of deallocating ids, parts per million: one in ten.
const DEALLOCATE_PPM: u32 = 100_000;
/// fio's flow weights of its write and trim jobs: nine writes per trim, as [`DEALLOCATE_PPM`].
const FIO_FLOW: [&str; 2] = ["--flow=9", "--flow=1"];
/// Microseconds a job ahead of its flow share sleeps instead of spinning.
const FIO_FLOW_SLEEP: &str = "--flow_sleep=100";

/// Why the target `o` (opened from `path`) cannot deallocate, if it cannot.
pub(super) fn no_deallocate(o: &Opened, path: &Path) -> Option<String> {
    if o.target.zeroing().deallocate {
        return None;
    }
    // Where the opener could not learn what the target carries, its note says why.
    if let Some(n) = o.notes.iter().find(|n| n.contains("deallocate")) {
        return Some(n.clone());
    }
    Some(if o.block_device {
        format!("{} carries no deallocate: its request queue takes no discard (queue/discard_max_bytes is 0)", path.display())
    } else {
        format!("{} carries no deallocate: its filesystem punches no holes (fallocate PUNCH_HOLE is not supported)", path.display())
    })
}

/// faultline's side: one timed cycle of 4 KiB random writes and deallocates at QD32. A zero
/// figure (n/a), with a note, where the target carries no deallocate.
pub(super) fn fl_trimwrite(c: &mut Ctx) -> Result<Fig> {
    settle(c)?;
    let qd = 32;
    let opened = open(c.a, true, qd)?;
    if let Some(why) = no_deallocate(&opened, &c.a.target) {
        c.note(format!("{ROW}: faultline n/a: {why}, and its writer refuses to deallocate there"));
        return Ok(Fig::default());
    }
    let mut t = opened.target;
    let mut w = spec(c.runs as u64 + 1, c.capacity, 4096, Pattern::Random {}, qd as u32);
    w.ops = OpMix { deallocate_ppm: DEALLOCATE_PPM, write_zeroes_ppm: 0 };
    fl_cycle(c, t.as_mut(), w)
}

/// fio's side, its write job tagging its blocks with crc32c when `crc`. A zero figure (n/a),
/// with a note, where fio cannot trim the target.
pub(super) fn fio_trimwrite(c: &mut Ctx, crc: bool) -> Result<Fig> {
    if let Some(why) = fio_cannot_trim(c) {
        c.note(format!("{ROW}: fio n/a: {why}"));
        return Ok(Fig::default());
    }
    let mut write = fio_job(c, "trimwrite-w", true);
    write.extend(s(&["--rw=randwrite", "--bs=4k", "--iodepth=16", "--randrepeat=0", "--flow_id=1", FIO_FLOW[0], FIO_FLOW_SLEEP]));
    if crc {
        write.extend(s(&["--verify=crc32c", "--do_verify=0"]));
    }
    let mut trim = fio_job(c, "trimwrite-t", true);
    trim.extend(s(&["--rw=randtrim", "--bs=4k", "--iodepth=16", "--randrepeat=0", "--flow_id=1", FIO_FLOW[1], FIO_FLOW_SLEEP]));
    fio_run(c, if crc { "trimwrite (crc32c)" } else { "trimwrite" }, &[write, trim].concat())
}

/// Why fio cannot trim the target, if it cannot.
fn fio_cannot_trim(c: &Ctx) -> Option<String> {
    if !c.block_device {
        return Some(format!(
            "{} is not a block device, and fio trims through io_uring with the BLKDISCARD ioctl, which a regular file \
             refuses (ENOTTY, fio job error 25); faultline deallocates a file's extent by punching a hole",
            c.a.target.display()
        ));
    }
    c.no_deallocate.as_ref().map(|why| format!("{why}, so fio's trims would fail"))
}
