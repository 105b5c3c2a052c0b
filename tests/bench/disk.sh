#!/usr/bin/env bash
# The disk-pool goals (DESIGN.md §An fsync, §Delayed commit), measured side by side in one run with fio in a separate
# process (psync, 1 MiB writes unless said otherwise; 4 jobs each own a
# quarter of one file):
#   a. pool file on a disk file system (DISKDIR, default /var/tmp) vs that
#      file system natively in the same directory: 1 GiB written with
#      end_fsync=1, 1 and 4 jobs, into a truncated (sparse) file and into a
#      fallocated one;
#   b. the same with an fsync every 64 MiB of each job (--fsync=64: every 64
#      writes of 1 MiB);
#   c. size-extending appends of 4 B and 4 KiB into a new file vs overwrites
#      of the same size in an existing one, writes/s over RT seconds, pool on
#      disk and pool on /dev/shm (and the disk file system natively, for
#      reference);
#   d. random 4 KiB writes over a written file: dnnfs (pool on /dev/shm) vs
#      go-fuse's loopback example over tmpfs (as `make bench` runs it: as
#      root it uses FUSE passthrough, so its writes bypass its daemon) and
#      vs the same loopback with passthrough off (tests/bench/loopplain);
#   e. pool on /dev/shm vs a tmpfs of our own: the writes of (a), and a cold
#      read (dnnfs: after a remount; tmpfs has no colder state than its
#      page cache, which is its storage: read again, as core.sh does).
# Prints the measured values (median of RUNS runs) and one table with every
# goal (DESIGN.md §An fsync): the ratio (median of the per-run ratios; min..max when
# RUNS > 1) and the goal. The machine's load average is printed before and
# after: ratios from one run are comparable, absolute numbers on a shared
# machine are not.
#   usage: [QUICK=1] [DISKDIR=/var/tmp] [BIN=path/to/dnnfs] tests/bench/disk.sh [RUNS]
# QUICK=1: 256 MiB instead of 1 GiB and 3 s instead of 10 s for the timed
# runs. About 5 minutes per run on an idle 2-core machine, 2 with QUICK=1.
set -euo pipefail
RUNS=${1:-1}
QUICK=${QUICK:-0}
DISKDIR=${DISKDIR:-/var/tmp}
cd "$(dirname "$0")/../.."
REPO=$PWD
if [ "$QUICK" = 1 ]; then SIZE=256; RT=3; else SIZE=1024; RT=10; fi # MiB, s
W=$(mktemp -d /dev/shm/dnnfs-disk.XXXX) # tmpfs, shm pools, logs
D=$(mktemp -d "$DISKDIR/dnnfs-disk.XXXX") # disk pools and the native disk peer
DPID= FPID= MNT=
cleanup() {
  [ -n "$FPID" ] && kill -KILL "$FPID" 2>/dev/null || true
  if [ -n "$DPID" ]; then
    kill -TERM "$DPID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
  fi
  umount -l $W/mnt 2>/dev/null || true
  umount $W/tmpfs 2>/dev/null || umount -l $W/tmpfs 2>/dev/null || true
  rm -rf "$W" "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p $W/mnt $W/tmpfs $D/native $W/bin
mount -t tmpfs -o size=$((SIZE * 3))m dnnfs-disk $W/tmpfs
if [ -z "${BIN:-}" ]; then
  go build -o $W/bin/dnnfs ./cmd/dnnfs
  BIN=$W/bin/dnnfs
fi
# -f: the daemon stays our child (older binaries have no -f and always do)
FG=$("$BIN" mount --help 2>&1 | grep -q -- --foreground && echo -f)
go build -o $W/bin/loopback github.com/hanwen/go-fuse/v2/example/loopback
LOOP=$W/bin/loopback
go build -o $W/bin/loopplain ./tests/bench/loopplain
PLAIN=$W/bin/loopplain
FSTYPE=$(findmnt -no FSTYPE -T "$D" | tail -1) # the last: the visible one of stacked mounts

# mountfs SYS: SYS is disk or shm (a fresh dnnfs pool there) or loopback
# or loopplain (over $W/tmpfs/lsrc); sets MNT to where the files go.
mountfs() {
  case $1 in
    disk | shm)
      local pool=$D/pool; [ $1 = shm ] && pool=$W/pool
      rm -f $pool
      $BIN mkfs --pool $pool --size $((SIZE * 2 + 1024))MiB >/dev/null
      $BIN mount $FG --pool $pool $W/mnt --log-level warn 2>>$W/daemon.log &
      ;;
    loopback | loopplain)
      rm -rf $W/tmpfs/lsrc; mkdir $W/tmpfs/lsrc
      $([ $1 = loopback ] && echo $LOOP || echo $PLAIN) -q -directmount $W/mnt $W/tmpfs/lsrc 2>>$W/daemon.log &
      ;;
  esac
  DPID=$! MNT=$W/mnt
  for _ in $(seq 200); do
    grep -q " $W/mnt " /proc/self/mountinfo && return
    kill -0 $DPID 2>/dev/null || break
    sleep 0.05
  done
  echo "mount of $1 failed:"; tail -20 $W/daemon.log; exit 1
}
# remount: the same pool again (dnnfs rebuilds its DRAM index, the kernel's
# page cache of the mount is gone).
remountfs() { local pool=$1; umountfs; $BIN mount $FG --pool $pool $W/mnt --log-level warn 2>>$W/daemon.log & DPID=$!
  for _ in $(seq 200); do grep -q " $W/mnt " /proc/self/mountinfo && return; sleep 0.05; done
  echo "remount failed:"; tail -20 $W/daemon.log; exit 1; }
umountfs() {
  [ -z "$DPID" ] && return
  kill -TERM $DPID
  if ! wait $DPID; then echo "daemon exited with an error on unmount:"; tail -20 $W/daemon.log; DPID=; exit 1; fi
  DPID=
  for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo || return 0; sleep 0.05; done
  echo "still mounted after the daemon exited"; exit 1
}
# native SYS: the peer directory (disk: the disk file system; tmpfs: ours).
native() { case $1 in disk) MNT=$D/native ;; tmpfs) MNT=$W/tmpfs/native ;; esac; rm -rf $MNT; mkdir -p $MNT; }

# runfio ARGS...: fio in the background (so the trap can stop it); sets BW
# (MiB/s) and IOPS of the direction that moved data.
runfio() {
  fio --output-format=terse --terse-version=3 --group_reporting --ioengine=psync "$@" >$W/fio.out 2>$W/fio.err &
  FPID=$!
  if ! wait $FPID; then FPID=; echo "fio failed: fio $*"; cat $W/fio.err; exit 1; fi
  FPID=
  read -r BW IOPS < <(awk -F';' '$5 != 0 { print "error", $5; exit } { if ($48 > 0) print $48/1024, $49; else print $7/1024, $8 }' $W/fio.out)
  if [ "$BW" = error ] || [ -z "$BW" ]; then echo "fio reported an error ($IOPS): fio $*"; cat $W/fio.err; exit 1; fi
}
# seqwrite DIR JOBS FSYNC PREP: SIZE MiB in 1 MiB writes, end_fsync, and an
# fsync every FSYNC writes when FSYNC > 0, into DIR/f made by PREP
# (truncate or fallocate) just before.
seqwrite() {
  local dir=$1 jobs=$2 fs=$3 prep=$4
  rm -f $dir/f
  if [ $prep = truncate ]; then truncate -s ${SIZE}M $dir/f; else fallocate -l ${SIZE}M $dir/f; fi
  sync
  runfio --name=w --directory=$dir --filename=f --rw=write --bs=1M --fallocate=none --end_fsync=1 --fsync=$fs \
    --numjobs=$jobs --size=$((SIZE / jobs))M --offset_increment=$((SIZE / jobs))M
}
seqread() { runfio --name=r --directory=$1 --filename=f --rw=read --bs=1M --numjobs=$2 --size=$((SIZE / $2))M --offset_increment=$((SIZE / $2))M; }
# append DIR BS: writes/s of BS-byte appends to a new file for RT seconds
# (each write extends the file). overwrite DIR BS: the same writes over a
# written 64 MiB file, again and again.
append() {
  rm -f $1/app
  runfio --name=a --directory=$1 --filename=app --rw=write --bs=$2 --fallocate=none --size=$((SIZE))M --runtime=$RT
}
overwrite() {
  rm -f $1/ow
  fio --name=p --directory=$1 --filename=ow --rw=write --bs=1M --size=64M --ioengine=psync --output=/dev/null
  runfio --name=o --directory=$1 --filename=ow --rw=write --bs=$2 --fallocate=none --size=64M --time_based --runtime=$RT
}
randwrite() { # DIR JOBS: 4 KiB random writes over a written file for RT seconds
  rm -f $1/r
  fio --name=p --directory=$1 --filename=r --rw=write --bs=1M --size=${SIZE}M --ioengine=psync --output=/dev/null
  runfio --name=rw --directory=$1 --filename=r --rw=randwrite --bs=4k --numjobs=$2 --size=$((SIZE / $2))M \
    --offset_increment=$((SIZE / $2))M --time_based --runtime=$RT
}

declare -A V # V[key] = values of the runs, space-separated
declare -A RATIO
put() { V[$1]+="$2 "; }
ratio() { RATIO[$1]+="$(awk "BEGIN{printf \"%.3f\", $2/$3}") "; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
range() { tr ' ' '\n' | grep . | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {if (NR > 1) printf "(%.2f..%.2f)", lo, hi}'; }

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, fio $(fio --version | sed 's/fio-//'), dnnfs $(git -C $REPO rev-parse --short HEAD)$(git -C $REPO diff --quiet HEAD -- . || echo +dirty)"
echo "# disk: $D on $FSTYPE ($(findmnt -no SOURCE -T "$D" | tail -1)); sizes ${SIZE} MiB, timed runs ${RT} s, $RUNS run(s)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq $RUNS); do
  echo "run $run/$RUNS: a, b (disk pool vs $FSTYPE)" >&2
  for fs in 0 64; do for jobs in 1 4; do for prep in truncate fallocate; do
    k=$fs,$jobs,$prep
    # Alternate the order between runs: neither side always goes first.
    for sys in $([ $((run % 2)) = 1 ] && echo "nat dnnfs" || echo "dnnfs nat"); do
      if [ $sys = nat ]; then native disk; seqwrite $MNT $jobs $fs $prep; put disk-nat,$k $BW; rm -rf $MNT
      else mountfs disk; seqwrite $MNT $jobs $fs $prep; put disk-dnnfs,$k $BW; umountfs; fi
    done
    ratio disk,$k $(echo ${V[disk-dnnfs,$k]} | awk '{print $NF}') $(echo ${V[disk-nat,$k]} | awk '{print $NF}')
  done; done; done

  echo "run $run/$RUNS: e (shm pool vs tmpfs)" >&2
  for jobs in 1 4; do for prep in truncate fallocate; do
    k=$jobs,$prep
    native tmpfs; seqwrite $MNT $jobs 0 $prep; put tmpfs-w,$k $BW
    seqread $MNT $jobs; put tmpfs-r,$k $BW; rm -rf $MNT
    mountfs shm; seqwrite $MNT $jobs 0 $prep; put shm-w,$k $BW
    remountfs $W/pool; seqread $MNT $jobs; put shm-r,$k $BW; umountfs
    ratio shmw,$k $(echo ${V[shm-w,$k]} | awk '{print $NF}') $(echo ${V[tmpfs-w,$k]} | awk '{print $NF}')
    ratio shmr,$k $(echo ${V[shm-r,$k]} | awk '{print $NF}') $(echo ${V[tmpfs-r,$k]} | awk '{print $NF}')
  done; done

  echo "run $run/$RUNS: c (appends vs overwrites)" >&2
  for sys in disk shm nat; do
    if [ $sys = nat ]; then native disk; else mountfs $sys; fi
    for bs in 4 4k; do
      append $MNT $bs; put app,$sys,$bs $IOPS
      overwrite $MNT $bs; put ow,$sys,$bs $IOPS
      ratio app,$sys,$bs $(echo ${V[app,$sys,$bs]} | awk '{print $NF}') $(echo ${V[ow,$sys,$bs]} | awk '{print $NF}')
    done
    if [ $sys = nat ]; then rm -rf $MNT; else umountfs; fi
  done

  echo "run $run/$RUNS: d (random 4 KiB writes vs loopback)" >&2
  for jobs in 1 4; do
    mountfs loopback; randwrite $MNT $jobs; put rw-loop,$jobs $IOPS; umountfs
    mountfs loopplain; randwrite $MNT $jobs; put rw-plain,$jobs $IOPS; umountfs
    mountfs shm; randwrite $MNT $jobs; put rw-shm,$jobs $IOPS; umountfs
    ratio rw,$jobs $(echo ${V[rw-shm,$jobs]} | awk '{print $NF}') $(echo ${V[rw-loop,$jobs]} | awk '{print $NF}')
    ratio rwp,$jobs $(echo ${V[rw-shm,$jobs]} | awk '{print $NF}') $(echo ${V[rw-plain,$jobs]} | awk '{print $NF}')
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

m() { echo ${V[$1]} | median; }
bsname() { case $1 in *k) echo "${1%k} KiB" ;; *) echo "$1 B" ;; esac; }
echo
echo "## measured values (median of $RUNS)"
printf "%-44s %12s %12s\n" "MiB/s, $SIZE MiB, 1 MiB writes" dnnfs native
for fs in 0 64; do for jobs in 1 4; do for prep in truncate fallocate; do
  k=$fs,$jobs,$prep
  printf "%-44s %12.0f %12.0f\n" "disk: $([ $fs = 0 ] && echo end_fsync || echo fsync/64MiB), $jobs job(s), ${prep}d" $(m disk-dnnfs,$k) $(m disk-nat,$k)
done; done; done
for jobs in 1 4; do for prep in truncate fallocate; do
  printf "%-44s %12.0f %12.0f\n" "shm vs tmpfs: write, $jobs job(s), ${prep}d" $(m shm-w,$jobs,$prep) $(m tmpfs-w,$jobs,$prep)
  printf "%-44s %12.0f %12.0f\n" "shm vs tmpfs: cold read, $jobs job(s), ${prep}d" $(m shm-r,$jobs,$prep) $(m tmpfs-r,$jobs,$prep)
done; done
printf "%-44s %12s %12s\n" "writes/s over $RT s" append overwrite
for sys in disk shm nat; do for bs in 4 4k; do
  printf "%-44s %12.0f %12.0f\n" "$(case $sys in disk) echo "disk pool";; shm) echo "shm pool";; nat) echo "$FSTYPE natively";; esac), $(bsname $bs)" $(m app,$sys,$bs) $(m ow,$sys,$bs)
done; done
printf "%-44s %12s %12s %12s\n" "IOPS over $RT s" dnnfs loopback loopplain
for jobs in 1 4; do printf "%-44s %12.0f %12.0f %12.0f\n" "random 4 KiB writes, $jobs job(s), shm pool" $(m rw-shm,$jobs) $(m rw-loop,$jobs) $(m rw-plain,$jobs); done

echo
echo "## disk-pool goals (ratio: median of per-run ratios$([ $RUNS -gt 1 ] && echo ', min..max'))"
printf "| %-58s | %-18s | %-6s | %-4s |\n" goal measured goal met
printf "|%s|%s|%s|%s|\n" "$(printf -- '-%.0s' {1..60})" "$(printf -- '-%.0s' {1..20})" "--------" "------"
row() { # name key goal
  local med; med=$(echo ${RATIO[$2]} | median)
  printf "| %-58s | %-18s | ≥ %-4s | %-4s |\n" "$1" "$(printf '%.2fx' $med) $(echo ${RATIO[$2]} | range)" "$3" \
    "$(awk "BEGIN{print ($med >= $3) ? \"yes\" : \"no\"}")"
}
for fs in 0 64; do for jobs in 1 4; do for prep in truncate fallocate; do
  row "disk pool / $FSTYPE, $([ $fs = 0 ] && echo end_fsync || echo 'fsync every 64 MiB'), $jobs job(s), ${prep}d" disk,$fs,$jobs,$prep $([ $fs = 0 ] && echo 1.0 || echo 0.9)
done; done; done
for jobs in 1 4; do for prep in truncate fallocate; do
  row "shm pool / tmpfs, write, $jobs job(s), ${prep}d" shmw,$jobs,$prep $([ $jobs = 1 ] && echo 0.75 || echo 0.8)
done; done
for jobs in 1 4; do for prep in truncate fallocate; do
  row "shm pool / tmpfs, cold read, $jobs job(s), ${prep}d file" shmr,$jobs,$prep 0.8
done; done
for jobs in 1 4; do row "random 4 KiB writes / go-fuse loopback (passthrough), $jobs job(s)" rw,$jobs 1.2; done
for jobs in 1 4; do row "random 4 KiB writes / loopback, no passthrough, $jobs job(s)" rwp,$jobs 1.2; done
for sys in disk shm; do for bs in 4 4k; do
  row "append / overwrite, $(bsname $bs), $sys pool" app,$sys,$bs 0.8
done; done
for bs in 4 4k; do
  printf "| %-58s | %-18s | %-6s | %-4s |\n" "(reference) append / overwrite, $(bsname $bs), $FSTYPE natively" "$(printf '%.2fx' $(echo ${RATIO[app,nat,$bs]} | median))" - -
done
