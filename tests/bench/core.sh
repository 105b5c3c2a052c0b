#!/usr/bin/env bash
# Issue-level measurements with fio in a separate process, all in one run:
# a 1 GiB file written with 1 MiB writes by 1 and by 4 jobs (each owning a
# quarter), then read back after a remount (dnnfs) / cache drop (tmpfs);
# dnnfs --lock=range and --lock=file against native tmpfs. Prints MiB/s
# medians of RUNS runs and ratios. The pools live on a tmpfs of their own
# mounted huge=$POOL_HUGE (never, as /dev/shm has it; within_size gives
# them 2 MiB pages: README, "Where to keep a pool").
#   usage: [POOL_HUGE=never|within_size] tests/bench/core.sh [RUNS] [BS]
set -euo pipefail
RUNS=${1:-3}
BS=${2:-1M}
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
go build -o bin/dnnfs-bench ./cmd/dnnfs
BIN=$PWD/bin/dnnfs-bench
W=$(mktemp -d /dev/shm/dnnfs-bench.XXXX)
DPID=
trap '[ -n "$DPID" ] && kill -TERM $DPID 2>/dev/null; sleep 1; umount -l $W/mnt 2>/dev/null || true; umount $W/tmpfs $W/pools 2>/dev/null || true; rm -rf $W' EXIT
mkdir -p $W/mnt $W/tmpfs $W/pools
mount -t tmpfs -o size=4g tmpfs $W/tmpfs
mount -t tmpfs -o size=4g,huge=${POOL_HUGE:=never} tmpfs $W/pools
ln -s pools/pool $W/pool # where lib.sh's mountdnnfs looks

fiobw() { # dir rw jobs -> MiB/s
  local dir=$1 rw=$2 jobs=$3
  fio --name=b --directory=$dir --filename=f --rw=$rw --bs=$BS --ioengine=psync \
      --numjobs=$jobs --size=$((1024 / jobs))M --offset_increment=$((1024 / jobs))M \
      --group_reporting --output-format=terse --terse-version=3 2>/dev/null |
    awk -F';' -v rw=$rw '{ if (rw=="write") print $48/1024; else print $7/1024 }'
}

declare -A R
for run in $(seq $RUNS); do
  for sys in tmpfs range file; do
    for jobs in 1 4; do
      if [ $sys = tmpfs ]; then
        rm -f $W/tmpfs/f; fallocate -l 1G $W/tmpfs/f
        w=$(fiobw $W/tmpfs write $jobs); r=$(fiobw $W/tmpfs read $jobs)
      else
        rm -f $W/pools/pool; $BIN mkfs --pool $W/pools/pool --size 3GiB >/dev/null
        mountdnnfs $BIN --lock $sys; fallocate -l 1G $W/mnt/f
        w=$(fiobw $W/mnt write $jobs); umountdnnfs
        mountdnnfs $BIN --lock $sys; r=$(fiobw $W/mnt read $jobs); umountdnnfs
      fi
      R[$sys,$jobs,w]+="$w "; R[$sys,$jobs,r]+="$r "
    done
  done
done
echo "# $(uname -r), $(nproc) CPUs, fio $(fio --version), bs=$BS, median of $RUNS, pools on a tmpfs huge=$POOL_HUGE"
printf "%-22s %5s %10s %10s %10s %9s %9s\n" workload jobs tmpfs range file range/tmpfs range/file
for op in w r; do for jobs in 1 4; do
  t=$(echo ${R[tmpfs,$jobs,$op]} | tr ' ' '\n' | median)
  a=$(echo ${R[range,$jobs,$op]} | tr ' ' '\n' | median)
  b=$(echo ${R[file,$jobs,$op]} | tr ' ' '\n' | median)
  name=$([ $op = w ] && echo "write 1 GiB" || echo "read after remount")
  printf "%-22s %5s %10.0f %10.0f %10.0f %9.2f %9.2f\n" "$name" $jobs $t $a $b $(awk "BEGIN{print $a/$t}") $(awk "BEGIN{print $a/$b}")
done; done
