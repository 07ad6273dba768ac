#!/usr/bin/env python3
"""Takes one loop device's "link" down or up, for the two-path rig of tests/dualport_loop.rs.

    port.py down /dev/loopN   the device's offset moves to the end of its backing file: the
                              kernel drains its in-flight I/O, its capacity becomes 0 and
                              every I/O through it fails; the node and open descriptors stay
    port.py up /dev/loopN     the offset moves back to 0: the whole medium again

`losetup -d` cannot pull a port the harness holds open: the kernel defers the detach to the
last close (LO_FLAGS_AUTOCLEAR) and the device serves I/O meanwhile. LOOP_GET_STATUS64 and
LOOP_SET_STATUS64 (linux/loop.h) take a struct loop_info64 of 232 bytes whose lo_offset is the
u64 at byte 24; everything else is written back as read.
"""
import fcntl
import os
import struct
import sys

LOOP_SET_STATUS64, LOOP_GET_STATUS64 = 0x4C04, 0x4C05


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("down", "up"):
        print("usage: port.py down|up /dev/loopN", file=sys.stderr)
        return 2
    op, dev = sys.argv[1], sys.argv[2]
    name = os.path.basename(os.path.realpath(dev))
    try:
        with open(f"/sys/block/{name}/loop/backing_file") as f:
            backing = f.read().strip()
    except OSError as e:
        print(f"{dev}: not an attached loop device ({e})", file=sys.stderr)
        return 1
    fd = os.open(dev, os.O_RDONLY)
    try:
        info = bytearray(232)
        fcntl.ioctl(fd, LOOP_GET_STATUS64, info)
        offset = os.stat(backing).st_size if op == "down" else 0
        struct.pack_into("=Q", info, 24, offset)
        fcntl.ioctl(fd, LOOP_SET_STATUS64, info)
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
