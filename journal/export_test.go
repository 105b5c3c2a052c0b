package journal

// HoldBatches takes the lock a leader needs to commit a batch, so that
// Commits started meanwhile queue (the first of them leads, blocked on
// it); the returned func releases it.
func HoldBatches(j *Journal) (release func()) {
	j.mu.Lock()
	return j.mu.Unlock
}

// Queued returns how many transactions wait for a batch, the blocked
// leader's own included.
func Queued(j *Journal) int {
	j.qmu.Lock()
	defer j.qmu.Unlock()
	return len(j.queue)
}
