#!/usr/bin/env bash
# Issue-level measurement of the two-layer log's cost, fio in a separate
# process: one 1 GiB file, 1 and 4 jobs (each owning its segment), 1 MiB
# writes (fio --thread: the jobs are threads of one process, as a training
# job's are), with a segmented session (setfattr user.dnnfs.session; fio does
# the first I/O and so becomes the session's process) against the same
# preallocated file without one. Median MiB/s of RUNS runs.
#   usage: tests/bench/session.sh [RUNS] [TAIL_INTERVAL]
set -euo pipefail
RUNS=${1:-5}
TI=${2:-4MiB}
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
go build -o bin/dnnfs-bench ./cmd/dnnfs
BIN=$PWD/bin/dnnfs-bench
W=$(mktemp -d /dev/shm/dnnfs-sess.XXXX)
DPID=
trap '[ -n "$DPID" ] && kill -TERM $DPID 2>/dev/null; sleep 1; umount -l $W/mnt 2>/dev/null || true; rm -rf $W' EXIT
mkdir -p $W/mnt
$BIN mkfs --pool $W/pool --size 3GiB >/dev/null
$BIN mount $(fgflag $BIN) --pool $W/pool $W/mnt --log-level warn --tail-interval $TI 2>>$W/daemon.log &
DPID=$!
for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo && break; sleep 0.05; done
fiobw() { # jobs
  fio --name=b --directory=$W/mnt --filename=f --rw=write --bs=1M --ioengine=psync --thread --numjobs=$1 \
      --size=$((1024 / $1))M --offset_increment=$((1024 / $1))M --group_reporting \
      --output-format=terse --terse-version=3 2>/dev/null | awk -F';' '{print $48/1024}'
}
declare -A R
for run in $(seq $RUNS); do
  for jobs in 1 4; do
    rm -f $W/mnt/f; fallocate -l 1G $W/mnt/f
    R[plain,$jobs]+="$(fiobw $jobs) "
    rm -f $W/mnt/f; touch $W/mnt/f
    setfattr -n user.dnnfs.session -v "threads=$jobs,size=1GiB" $W/mnt/f
    R[session,$jobs]+="$(fiobw $jobs) "
    if getfattr -n user.dnnfs.session $W/mnt/f >/dev/null 2>&1; then echo "session did not close ($jobs jobs):"; getfattr --only-values -n user.dnnfs.session $W/mnt/f; echo; tail -5 $W/daemon.log; exit 1; fi
  done
done
echo "# $(uname -r), $(nproc) CPUs, 1 GiB, 1 MiB writes, tail interval $TI, median of $RUNS"
printf "%5s %12s %12s %10s\n" jobs plain session session/plain
for jobs in 1 4; do
  a=$(echo ${R[plain,$jobs]} | tr ' ' '\n' | median); b=$(echo ${R[session,$jobs]} | tr ' ' '\n' | median)
  printf "%5s %12.0f %12.0f %10.3f\n" $jobs $a $b $(awk "BEGIN{print $b/$a}")
done
