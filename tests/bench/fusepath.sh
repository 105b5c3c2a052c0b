#!/usr/bin/env bash
# The FUSE data path, measured with fio in a separate process, all in one
# run: dnnfs built from this tree ("new") against a baseline binary
# ("base", e.g. built from main) and native tmpfs, pools on /dev/shm.
# Workloads on one 1 GiB file (fallocated first): sequential write and
# read (after a remount) with BS-sized psync calls, random 4 KiB writes
# and reads (time-based). Prints MiB/s medians of RUNS runs and ratios.
#   usage: tests/bench/fusepath.sh [RUNS] [BS] [BASE_BINARY]
set -euo pipefail
RUNS=${1:-3}
BS=${2:-1M}
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BASE=$(realpath "${3:-bin/dnnfs-base}")
go build -o bin/dnnfs-fusepath ./cmd/dnnfs
NEW=$PWD/bin/dnnfs-fusepath
RT=${RT:-5} # seconds of each random workload
W=$(mktemp -d /dev/shm/dnnfs-fusepath.XXXX)
DPID=
trap '[ -n "$DPID" ] && kill -TERM $DPID 2>/dev/null; sleep 1; umount -l $W/mnt 2>/dev/null || true; umount $W/tmpfs 2>/dev/null || true; rm -rf $W' EXIT
mkdir -p $W/mnt $W/tmpfs
mount -t tmpfs -o size=2g tmpfs $W/tmpfs

fiobw() { # dir rw bs [extra fio args] -> MiB/s
  local dir=$1 rw=$2 bs=$3
  shift 3
  fio --name=b --directory=$dir --filename=f --rw=$rw --bs=$bs --ioengine=psync --size=1G \
      --group_reporting --output-format=terse --terse-version=3 "$@" 2>/dev/null |
    awk -F';' -v rw=$rw '{ if (rw ~ /write/) print $48/1024; else print $7/1024 }'
}
run() { # sys dir [binary]: the sequential read comes after a remount (dnnfs)
  local sys=$1 dir=$2 bin=${3:-}
  R[$sys,sw]+="$(fiobw $dir write $BS) "
  if [ -n "$bin" ]; then umountdnnfs; mountdnnfs $bin; fi
  R[$sys,sr]+="$(fiobw $dir read $BS) "
  R[$sys,rw]+="$(fiobw $dir randwrite 4k --runtime=$RT --time_based --randrepeat=0) "
  R[$sys,rr]+="$(fiobw $dir randread 4k --runtime=$RT --time_based --randrepeat=0) "
  if [ -n "$bin" ]; then umountdnnfs; mountdnnfs $bin; fi
  R[$sys,mr]+="$(fiobw $dir read $BS --ioengine=mmap) "
}

declare -A R
for r in $(seq $RUNS); do
  order="tmpfs base new"
  [ $((r % 2)) = 0 ] && order="tmpfs new base" # neither binary always runs later
  for sys in $order; do
    if [ $sys = tmpfs ]; then
      rm -f $W/tmpfs/f; fallocate -l 1G $W/tmpfs/f
      run tmpfs $W/tmpfs
      rm -f $W/tmpfs/f
    else
      bin=$([ $sys = base ] && echo $BASE || echo $NEW)
      rm -f $W/pool; $NEW mkfs --pool $W/pool --size 3GiB >/dev/null
      mountdnnfs $bin; fallocate -l 1G $W/mnt/f
      run $sys $W/mnt $bin
      umountdnnfs
    fi
  done
done
rm -f $W/pool
echo "# $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), fio $(fio --version), bs=$BS, median of $RUNS"
printf "%-24s %9s %9s %9s %9s %9s %9s\n" "workload (MiB/s)" tmpfs base new base/tmpfs new/tmpfs new/base
for k in sw sr rw rr mr; do
  case $k in
  sw) name="seq write $BS" ;; sr) name="seq read $BS (remount)" ;;
  rw) name="rand write 4k" ;; rr) name="rand read 4k" ;;
  mr) name="mmap read $BS (remount)" ;;
  esac
  t=$(echo ${R[tmpfs,$k]} | tr ' ' '\n' | median)
  a=$(echo ${R[base,$k]} | tr ' ' '\n' | median)
  b=$(echo ${R[new,$k]} | tr ' ' '\n' | median)
  printf "%-24s %9.0f %9.0f %9.0f %9.2f %9.2f %9.2f\n" "$name" $t $a $b \
    $(awk "BEGIN{print $a/$t}") $(awk "BEGIN{print $b/$t}") $(awk "BEGIN{print $b/$a}")
done
