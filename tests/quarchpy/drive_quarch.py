"""Drives a Quarch module through Quarch's own Python client, quarchpy, the way a lab script
does, and prints what quarchpy returned for each command as one JSON object per line.

Usage: python3 drive_quarch.py CONNECTION   (e.g. SERIAL:/dev/pts/3 or TCP:127.0.0.1)

Run by tests/quarchpy.rs against `faultline emulate quarch`; the Rust test asserts on the
replies. Nothing here checks anything: it only reports.
"""
import json
import sys

from quarchpy.device import quarchDevice

# Identify, power down, query, power up, query, one port pulled and restored, pin-mate timing
# set and read back as Quarch's AN-003 sets it, and the module's default state.
COMMANDS = [
    "*IDN?",
    "hello?",
    "RUN:POWer DOWN",
    "RUN:POWer?",
    "RUN:POWer UP",
    "RUN:POWer?",
    "SIGnal:PORT_A:SOURce 0",
    "run pow up",
    "SIGnal:PORT_A:SOURce?",
    "SIGnal:PORT_A:SOURce 1",
    "RUN:POWer UP",
    "sig:port_a:sour?",
    "source:1:delay 0",
    "source:2:delay 25",
    "source:3:delay 500",
    "source:1:delay?",
    "source:2:delay?",
    "source:3:delay?",
    "source:3:delay 2000",
    "source:3:delay?",
    "conf:def:state",
    "RUN:POWer?",
]


def main():
    conn = sys.argv[1]
    # The constructor sends *tst? and refuses a module that answers neither OK nor FAIL.
    dev = quarchDevice(conn)
    try:
        for cmd in COMMANDS:
            reply = dev.sendCommand(cmd)
            print(json.dumps({"command": cmd, "reply": reply}), flush=True)
    finally:
        dev.closeConnection()


if __name__ == "__main__":
    main()
