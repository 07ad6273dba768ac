#!/bin/busybox sh
# faultline lab: the guest's /init (busybox sh). Mounts, loads the modules (nvme_core with
# the multipath setting the kernel command line gives as faultline.multipath=Y|N), mounts the
# 9p share (tag "lab") on /share, then runs /share/lab/cmd (faultline.mode=run) or a shell on
# the console (faultline.mode=shell), writes the command's exit code to /share/lab/exit-code
# and the kernel's log to /share/lab/dmesg.log, and powers off. faultline.mode=agent (`lab
# host`: one controller, no share) serves `faultline agent --stdio` on the virtio-serial port
# named dev.faultline.agent, its target the namespace, until the coordinator leaves.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mp=Y
mode=run
for a in $(cat /proc/cmdline); do
    case "$a" in
        faultline.multipath=*) mp="${a#faultline.multipath=}" ;;
        faultline.mode=*) mode="${a#faultline.mode=}" ;;
    esac
done
# Port B's controller is held back until port A's is named, so that A is nvme0 and B nvme1
# (and the multipath head nvme0n1) at every boot: the nvme driver probes asynchronously.
[ -e /sys/bus/pci/devices/0000:02:00.0 ] && echo none > /sys/bus/pci/devices/0000:02:00.0/driver_override
for m in $(cat /lib/modules/load-order); do
    case "$m" in
        nvme-core.ko) insmod "/lib/modules/$m" multipath="$mp" || echo "lab-init: insmod $m failed" ;;
        *) insmod "/lib/modules/$m" || echo "lab-init: insmod $m failed" ;;
    esac
done
i=0
while [ $i -lt 100 ] && [ ! -e /sys/class/nvme/nvme0 ]; do sleep 0.1; i=$((i + 1)); done
if [ "$mode" = agent ]; then
    i=0
    while [ $i -lt 100 ] && [ ! -e /dev/nvme0n1 ]; do sleep 0.1; i=$((i + 1)); done
    port=
    for d in /sys/class/virtio-ports/*; do
        [ "$(cat "$d/name" 2>/dev/null)" = dev.faultline.agent ] && port="/dev/${d##*/}"
    done
    echo "lab-init: booted as a host, $(ls /sys/class/nvme | tr '\n' ' '), the agent on ${port:-no port}" > /dev/ttyS0
    # One open of the port for both directions (a virtio port takes one opener).
    [ -n "$port" ] && faultline agent --stdio --target /dev/nvme0n1 <> "$port" >&0 2>/dev/ttyS0
    echo "lab-init: the agent ended ($?)" > /dev/ttyS0
    poweroff -f
fi
echo > /sys/bus/pci/devices/0000:02:00.0/driver_override
echo 0000:02:00.0 > /sys/bus/pci/drivers_probe
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 lab /share || { echo "lab-init: cannot mount the 9p share"; poweroff -f; }
# The namespace's paths appear after the controllers' asynchronous probe.
i=0
while [ $i -lt 100 ] && [ "$(ls /sys/class/nvme 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.1; i=$((i + 1)); done
i=0
while [ $i -lt 100 ] && ! ls /dev/nvme*n* >/dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
echo "lab-init: booted, multipath=$mp, $(ls /sys/class/nvme | tr '\n' ' ')" > /dev/ttyS0
echo up > /share/lab/booted
# The guest's heartbeat: its uptime in the share every 2 s, from a process of its own, so
# that the host tells a guest that stopped (no beat) from a command that is slow.
( while :; do cut -d' ' -f1 /proc/uptime > /share/lab/heartbeat; sleep 2; done ) &
cd /share
if [ "$mode" = shell ]; then
    echo "faultline lab shell: the namespace is one of $(ls /dev/nvme*n* | tr '\n' ' '); exit powers off."
    ENV=/share/lab/cmd setsid cttyhack sh
    echo $? > /share/lab/exit-code
else
    sh /share/lab/cmd > /share/lab/guest.log 2>&1
    echo $? > /share/lab/exit-code
fi
dmesg > /share/lab/dmesg.log 2>/dev/null
sync
poweroff -f
