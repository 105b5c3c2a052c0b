#!/usr/bin/env bash
# What FUSE over io_uring's per-CPU queues would pay, estimated without a
# transport: fio pinned to CPU 0 against a dnnfs daemon whose threads are
# pinned to the same CPU (as a ring of that CPU would serve its requests),
# to the other CPU, or left to the scheduler (today). Pool on /dev/shm.
# Prints medians of RUNS runs and the ratio same-CPU / unpinned.
#   usage: tests/bench/fusepin.sh [RUNS]
set -euo pipefail
RUNS=${1:-3}
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs"; exit 1; }
go build -o bin/dnnfs-fusepath ./cmd/dnnfs
BIN=$PWD/bin/dnnfs-fusepath
W=$(mktemp -d /dev/shm/dnnfs-fusepin.XXXX)
DPID=
trap '[ -n "$DPID" ] && kill -TERM $DPID 2>/dev/null; sleep 1; umount -l $W/mnt 2>/dev/null || true; rm -rf $W' EXIT
mkdir -p $W/mnt
$BIN mkfs --pool $W/pool --size 3GiB >/dev/null
$BIN mount $(fgflag $BIN) --pool $W/pool $W/mnt --log-level warn 2>>$W/daemon.log &
DPID=$!
for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo && break; sleep 0.05; done
fallocate -l 1G $W/mnt/f
fio --name=b --directory=$W/mnt --filename=f --rw=write --bs=1M --ioengine=psync --size=1G >/dev/null 2>&1
fiov() { # rw bs field [args] -> the terse field (IOPS or KiB/s)
  local rw=$1 bs=$2 field=$3
  shift 3
  fio --name=b --directory=$W/mnt --filename=f --rw=$rw --bs=$bs --ioengine=psync --size=1G \
      --cpus_allowed=0 --output-format=terse --terse-version=3 "$@" 2>/dev/null | cut -d';' -f$field
}
declare -A R
for _ in $(seq $RUNS); do
  for cpus in 0 1 0-$(($(nproc) - 1)); do
    taskset -a -cp $cpus $DPID >/dev/null
    R[$cpus,rr]+="$(fiov randread 4k 8 --runtime=4 --time_based --randrepeat=0) "
    R[$cpus,rw]+="$(fiov randwrite 4k 49 --runtime=4 --time_based --randrepeat=0) "
    R[$cpus,sr]+="$(fiov read 1M 7 | awk '{print $1/1024}') "
  done
done
any=0-$(($(nproc) - 1))
echo "# $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), median of $RUNS; fio on CPU 0"
printf "%-22s %12s %12s %12s %10s\n" workload "daemon CPU 0" "CPU 1" unpinned same/unpinned
for k in rr rw sr; do
  case $k in rr) name="rand read 4k IOPS" ;; rw) name="rand write 4k IOPS" ;; sr) name="seq read 1M MiB/s" ;; esac
  s=$(echo ${R[0,$k]} | tr ' ' '\n' | median)
  o=$(echo ${R[1,$k]} | tr ' ' '\n' | median)
  u=$(echo ${R[$any,$k]} | tr ' ' '\n' | median)
  printf "%-22s %12.0f %12.0f %12.0f %10.2f\n" "$name" $s $o $u $(awk "BEGIN{print $s/$u}")
done
