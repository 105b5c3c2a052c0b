# Helpers the focused fio scripts share (source it after setting W, the
# scratch directory with mnt/ in it, and DPID=).

# mountdnnfs BIN [mount flags...]: mounts the pool $W/pool on $W/mnt in the
# background (its pid in DPID) and returns once the mount is live.
mountdnnfs() {
  local bin=$1
  shift
  "$bin" mount --pool $W/pool $W/mnt --log-level warn "$@" 2>>$W/daemon.log &
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

# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
