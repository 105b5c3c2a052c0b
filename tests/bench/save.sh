#!/usr/bin/env bash
# Disk-backed pools (DESIGN.md §An fsync): the daemon's CPU per GiB written and its memory during a large
# checkpoint save. fio (a separate process) writes SIZE GiB into one
# truncated file with 1 MiB psync writes, 4 jobs each owning a quarter, and
# fsyncs it at the end; meanwhile the daemon's /proc/PID/stat (utime +
# stime) and /proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile, RssShmem) are
# sampled once a second. RSS counts the pages of the mapped pool the daemon
# has touched (RssFile for a pool on disk, RssShmem for one in /dev/shm), so
# the daemon's own memory is RssAnon; all are printed. Then the same save
# natively in the pool's directory, for reference.
#   usage: [QUICK=1] [POOL=disk|shm] [DISKDIR=/var/tmp] [BIN=path/to/dnnfs] tests/bench/save.sh [SIZE_GIB]
# POOL defaults to disk when DISKDIR has room for the pool (SIZE + 2 GiB) and
# the native copy, else shm. QUICK=1 writes 2 GiB.
set -euo pipefail
QUICK=${QUICK:-0}
SIZE=${1:-$([ "$QUICK" = 1 ] && echo 2 || echo 8)} # GiB
DISKDIR=${DISKDIR:-/var/tmp}
cd "$(dirname "$0")/../.."
REPO=$PWD
PSIZE=$((SIZE + 2)) # GiB
if [ -z "${POOL:-}" ]; then
  avail=$(df -B1G --output=avail "$DISKDIR" | tail -1 | tr -d ' ')
  POOL=$([ "$avail" -gt $((PSIZE + SIZE + 4)) ] && echo disk || echo shm)
fi
case $POOL in disk) PD=$DISKDIR ;; shm) PD=/dev/shm ;; *) echo "POOL=$POOL: want disk or shm"; exit 2 ;; esac
W=$(mktemp -d /dev/shm/dnnfs-save.XXXX)
P=$(mktemp -d "$PD/dnnfs-save.XXXX")
DPID= FPID= SPID=
cleanup() {
  [ -n "$FPID" ] && kill -KILL "$FPID" 2>/dev/null || true
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null || true
  if [ -n "$DPID" ]; then
    kill -TERM "$DPID" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
  fi
  umount -l $W/mnt 2>/dev/null || true
  rm -rf "$W" "$P"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p $W/mnt
if [ -z "${BIN:-}" ]; then
  go build -o $W/dnnfs ./cmd/dnnfs
  BIN=$W/dnnfs
fi
# -f: the daemon stays our child (older binaries have no -f and always do)
FG=$("$BIN" mount --help 2>&1 | grep -q -- --foreground && echo -f)
HZ=$(getconf CLK_TCK)
$BIN mkfs --pool $P/pool --size ${PSIZE}GiB >/dev/null
$BIN mount $FG --pool $P/pool $W/mnt --log-level warn 2>>$W/daemon.log &
DPID=$!
for _ in $(seq 200); do grep -q " $W/mnt " /proc/self/mountinfo && break; sleep 0.05; done
grep -q " $W/mnt " /proc/self/mountinfo || { echo "mount failed"; cat $W/daemon.log; exit 1; }

# sample: one line a second: seconds, cpu ticks, VmRSS VmHWM RssAnon RssFile RssShmem (KiB).
sample() {
  local t0=$(date +%s.%N)
  while kill -0 $DPID 2>/dev/null; do
    local st; st=$(cat /proc/$DPID/stat 2>/dev/null) || break
    st=${st##*) }
    set -- $st # fields from the state on: utime is the 12th, stime the 13th
    local cpu=$((${12} + ${13}))
    echo "$(awk "BEGIN{print $(date +%s.%N) - $t0}") $cpu $(awk '{v[$1] = $2} END {print v["VmRSS:"], v["VmHWM:"], v["RssAnon:"], v["RssFile:"], v["RssShmem:"]}' /proc/$DPID/status)"
    sleep 1
  done
}
stat_cpu() { local st; st=$(cat /proc/$DPID/stat); st=${st##*) }; set -- $st; echo $((${12} + ${13})); }

truncate -s ${SIZE}G $W/mnt/ckpt
sync
echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, fio $(fio --version | sed 's/fio-//'), dnnfs $(git -C $REPO rev-parse --short HEAD)$(git -C $REPO diff --quiet HEAD -- . || echo +dirty)"
echo "# pool: ${PSIZE} GiB in $P ($(findmnt -no FSTYPE -T "$P" | tail -1)); save: ${SIZE} GiB, 4 jobs, 1 MiB psync writes into a truncated file, end_fsync"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
sample >$W/samples &
SPID=$!
c0=$(stat_cpu)
t0=$(date +%s.%N)
fio --name=save --directory=$W/mnt --filename=ckpt --rw=write --bs=1M --ioengine=psync --fallocate=none --end_fsync=1 \
  --numjobs=4 --size=$((SIZE * 256))M --offset_increment=$((SIZE * 256))M --group_reporting \
  --output-format=terse --terse-version=3 >$W/fio.out 2>$W/fio.err &
FPID=$!
if ! wait $FPID; then FPID=; echo "fio failed"; cat $W/fio.err; exit 1; fi
FPID=
t1=$(date +%s.%N)
c1=$(stat_cpu)
hwm=$(awk '/^VmHWM:/ {print $2}' /proc/$DPID/status)
sleep 1.1 # one more sample after the fsync
kill $SPID; wait $SPID 2>/dev/null || true; SPID=
# The same save into the pool's directory natively, for reference.
mkdir -p $P/native; truncate -s ${SIZE}G $P/native/ckpt; sync
n0=$(date +%s.%N)
fio --name=save --directory=$P/native --filename=ckpt --rw=write --bs=1M --ioengine=psync --fallocate=none --end_fsync=1 \
  --numjobs=4 --size=$((SIZE * 256))M --offset_increment=$((SIZE * 256))M --group_reporting \
  --output-format=terse --terse-version=3 >$W/fio-native.out 2>$W/fio.err &
FPID=$!
if ! wait $FPID; then FPID=; echo "fio (native) failed"; cat $W/fio.err; exit 1; fi
FPID=
n1=$(date +%s.%N)
rm -f $P/native/ckpt
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(awk -F';' '$5 != 0 { print "error"; exit } { print $48/1024 }' $W/fio.out)
[ "$bw" = error ] && { echo "fio reported an error"; cat $W/fio.err; exit 1; }
echo
echo "samples (s, daemon CPU s, VmRSS VmHWM RssAnon RssFile RssShmem in MiB), every 5th:"
awk -v hz=$HZ -v c0=$c0 'NR % 5 == 1 { printf "  %6.1f %7.2f %7.0f %7.0f %7.0f %7.0f %7.0f\n", $1, ($2 - c0) / hz, $3/1024, $4/1024, $5/1024, $6/1024, $7/1024 }' $W/samples
echo
awk -v hz=$HZ -v c0=$c0 -v c1=$c1 -v t0=$t0 -v t1=$t1 -v gib=$SIZE -v bw=$bw -v hwm=$hwm -v n0=$n0 -v n1=$n1 '
  { if ($3 > rss) rss = $3; if ($5 > anon) anon = $5 }
  END {
    cpu = (c1 - c0) / hz
    printf "save of %d GiB: %.1f s (fio: %.0f MiB/s incl. the final fsync); the same natively in the pool'"'"'s directory: %.1f s\n", gib, t1 - t0, bw, n1 - n0
    printf "daemon CPU: %.2f s, %.3f CPU-s per GiB written\n", cpu, cpu / gib
    printf "daemon peak VmRSS %.0f MiB (VmHWM %.0f MiB; counts the mapped pool pages resident in it), peak RssAnon %.0f MiB (its own memory)\n", rss / 1024, hwm / 1024, anon / 1024
  }' $W/samples
