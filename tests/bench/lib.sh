# Helpers the focused fio scripts share (source it after setting W, the
# scratch directory with mnt/ in it, and DPID=).

# mountdnnfs BIN [mount flags...]: mounts the pool $W/pool on $W/mnt in the
# background (its pid in DPID) and returns once the mount is live.
mountdnnfs() {
  local bin=$1
  shift
  "$bin" mount $(fgflag "$bin") --pool $W/pool $W/mnt --log-level warn "$@" 2>>$W/daemon.log &
  DPID=$!
  for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo && return; sleep 0.05; done
  echo "mount failed"; cat $W/daemon.log; exit 1
}

# umountdnnfs: stops the daemon mountdnnfs started (SIGTERM unmounts) and
# waits for the mount to go.
umountdnnfs() {
  kill -TERM $DPID; wait $DPID; DPID=
  for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo || return 0; sleep 0.05; done
}

# fgflag BIN: -f if BIN's mount backgrounds itself unless told (it has
# --foreground; older binaries always stay): the scripts own the daemon's pid.
fgflag() { "$1" mount --help 2>&1 | grep -q -- --foreground && echo -f; }

# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
