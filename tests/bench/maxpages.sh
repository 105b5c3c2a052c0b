#!/usr/bin/env bash
# What fs.fuse.max_pages_limit 257 (README, "Tuning") changes: 1 MiB
# writes (end_fsync) and reads after a remount by fio psync from its own
# buffers, which do not start on a page, 1 GiB by 1 and 4 jobs, a /dev/shm
# pool vs a tmpfs of our own, with the limit at 256 and at 257 in turn
# within each round. Prints the ratio to tmpfs per round; restores the
# limit on exit. Needs root.
#   usage: [BIN=path/to/dnnfs] tests/bench/maxpages.sh [ROUNDS]
set -euo pipefail
ROUNDS=${1:-3}
cd "$(dirname "$0")/../.."
LIMFILE=/proc/sys/fs/fuse/max_pages_limit
[ -w $LIMFILE ] || { echo "maxpages.sh: $LIMFILE is missing or not writable (kernel before 6.13, or not root)"; exit 1; }
OLD=$(cat $LIMFILE)
W=$(mktemp -d /dev/shm/dnnfs-maxpages.XXXX)
P=
cleanup() {
  [ -n "$P" ] && kill -TERM "$P" 2>/dev/null && wait "$P" 2>/dev/null || true
  echo "$OLD" > $LIMFILE
  umount $W/tmpfs 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p $W/mnt $W/tmpfs $W/bin
mount -t tmpfs -o size=3g dnnfs-maxpages $W/tmpfs
if [ -z "${BIN:-}" ]; then go build -o $W/bin/dnnfs ./cmd/dnnfs; BIN=$W/bin/dnnfs; fi
mnt() { "$BIN" mount -f --pool $W/pool $W/mnt --log-level warn & P=$!
  for _ in $(seq 200); do grep -q " $W/mnt " /proc/self/mountinfo && return; sleep 0.05; done
  echo "mount failed"; exit 1; }
umnt() { kill -TERM $P; wait $P; P=; }
f() { fio --output-format=terse --terse-version=3 --group_reporting --ioengine=psync --thread --name=x --directory=$1 --filename=f --bs=1M "${@:2}" |
  awk -F';' '{ if ($48 > 0) print int($48/1024); else print int($7/1024) }'; }
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); MiB/s dnnfs/tmpfs=ratio"
for r in $(seq $ROUNDS); do
  for lim in 256 257; do
    echo $lim > $LIMFILE
    rm -f $W/pool; "$BIN" mkfs --pool $W/pool --size 4GiB >/dev/null
    mnt
    for j in 1 4; do
      args=(--numjobs=$j --size=$((1024 / j))M --offset_increment=$((1024 / j))M)
      rm -f $W/mnt/f $W/tmpfs/f; truncate -s 1G $W/mnt/f; truncate -s 1G $W/tmpfs/f
      wd=$(f $W/mnt --rw=write --end_fsync=1 "${args[@]}"); wt=$(f $W/tmpfs --rw=write --end_fsync=1 "${args[@]}")
      umnt; mnt
      rd=$(f $W/mnt --rw=read "${args[@]}"); rt=$(f $W/tmpfs --rw=read "${args[@]}")
      echo "round $r limit $lim jobs $j: write $wd/$wt=$(awk "BEGIN{printf \"%.2f\", $wd/$wt}") read after remount $rd/$rt=$(awk "BEGIN{printf \"%.2f\", $rd/$rt}")"
    done
    umnt
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
