#!/usr/bin/env bash
# Disk-backed pools (DESIGN.md §An fsync): the daemon's CPU per GiB written, which a loaded machine blurs
# less than MiB/s. fio (a separate process) writes SIZE MiB with 1 MiB psync
# writes and end_fsync, 1 job and 4 (each owning a quarter), into a file
# made just before by truncate (sparse) or fallocate; the daemon's utime +
# stime (/proc/PID/stat) is read before and after each fio run. A tmpfs of
# our own gets the same writes in the same run, for the MiB/s ratio.
# Prints medians of RUNS runs: MiB/s of both, the ratio, daemon CPU-s/GiB.
# With PROFILE=DIR the daemon also writes a CPU profile per case there
# (go tool pprof -top BIN DIR/JOBS-PREP.RUN).
#   usage: [POOLDIR=/dev/shm] [BIN=path/to/dnnfs] [PROFILE=dir] tests/bench/writecpu.sh [RUNS] [SIZE_MiB]
set -euo pipefail
RUNS=${1:-3}
SIZE=${2:-512}
POOLDIR=${POOLDIR:-/dev/shm}
cd "$(dirname "$0")/../.."
REPO=$PWD
. tests/bench/lib.sh # median, umountdnnfs
W=$(mktemp -d /dev/shm/dnnfs-wcpu.XXXX) # mnt, tmpfs, logs
P=$(mktemp -d "$POOLDIR/dnnfs-wcpu.XXXX") # the pool
DPID=
cleanup() {
  if [ -n "$DPID" ]; then kill -TERM "$DPID" 2>/dev/null || true; sleep 1; fi
  umount -l $W/mnt 2>/dev/null || true
  umount $W/tmpfs 2>/dev/null || umount -l $W/tmpfs 2>/dev/null || true
  rm -rf "$W" "$P"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p $W/mnt $W/tmpfs
mount -t tmpfs -o size=$((SIZE * 2))m dnnfs-wcpu $W/tmpfs
if [ -z "${BIN:-}" ]; then
  go build -o $W/dnnfs ./cmd/dnnfs
  BIN=$W/dnnfs
fi
HZ=$(getconf CLK_TCK)
cpu() { local st; st=$(cat /proc/$1/stat); st=${st##*) }; set -- $st; echo $((${12} + ${13})); }
fiow() { # DIR JOBS -> MiB/s
  fio --name=w --directory=$1 --filename=f --rw=write --bs=1M --ioengine=psync --fallocate=none --end_fsync=1 \
    --numjobs=$2 --size=$((SIZE / $2))M --offset_increment=$((SIZE / $2))M --group_reporting \
    --output-format=terse --terse-version=3 2>/dev/null | awk -F';' '$5 != 0 { print "error"; exit } { print $48/1024 }'
}
prep() { rm -f $1/f; if [ $2 = truncate ]; then truncate -s ${SIZE}M $1/f; else fallocate -l ${SIZE}M $1/f; fi; sync; }

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, fio $(fio --version | sed 's/fio-//'), dnnfs $(git -C $REPO rev-parse --short HEAD)$(git -C $REPO diff --quiet HEAD -- . || echo +dirty)"
echo "# pool in $P ($(findmnt -no FSTYPE -T "$P" | tail -1)); $SIZE MiB, 1 MiB psync writes, end_fsync; $RUNS run(s)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A V
for run in $(seq $RUNS); do
  for jobs in 1 4; do for pr in truncate fallocate; do
    k=$jobs,$pr
    prep $W/tmpfs $pr; t=$(fiow $W/tmpfs $jobs)
    rm -f $P/pool; $BIN mkfs --pool $P/pool --size $((SIZE * 2 + 1024))MiB >/dev/null
    $BIN mount --pool $P/pool $W/mnt --log-level warn ${PROFILE:+--cpuprofile $PROFILE/$jobs-$pr.$run} 2>>$W/daemon.log &
    DPID=$!
    for _ in $(seq 200); do grep -q " $W/mnt " /proc/self/mountinfo && break; sleep 0.05; done
    grep -q " $W/mnt " /proc/self/mountinfo || { echo "mount failed"; tail -20 $W/daemon.log; exit 1; }
    prep $W/mnt $pr
    c0=$(cpu $DPID); d=$(fiow $W/mnt $jobs); c1=$(cpu $DPID)
    umountdnnfs
    if [ "$t" = error ] || [ "$d" = error ]; then echo "fio reported an error"; exit 1; fi
    V[$k,t]+="$t "; V[$k,d]+="$d "
    V[$k,r]+="$(awk "BEGIN{print $d/$t}") "
    V[$k,c]+="$(awk "BEGIN{print ($c1 - $c0) / $HZ * 1024 / $SIZE}") "
  done; done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
m() { echo ${V[$1]} | tr ' ' '\n' | grep . | median; }
printf "%-24s %10s %10s %8s %14s\n" "case (median)" "dnnfs" tmpfs ratio "daemon CPU-s/GiB"
for jobs in 1 4; do for pr in truncate fallocate; do
  k=$jobs,$pr
  printf "%-24s %10.0f %10.0f %8.2f %14.3f\n" "$jobs job(s), ${pr}d" $(m $k,d) $(m $k,t) $(m $k,r) $(m $k,c)
done; done
