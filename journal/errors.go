package journal

import "errors"

// Sentinel errors.
var (
	// ErrTooLarge: a transaction does not fit the journal region; nothing
	// was written. The operation must be split or refused (ENOSPC).
	ErrTooLarge = errors.New("journal: metadata transaction larger than the journal")
	// ErrBadJournal: the journal header is not a journal (bad magic), or a
	// committed transaction fails its checksum. The pool needs fsck.
	ErrBadJournal = errors.New("journal: damaged")
	// ErrCommitPanicked: the leader committing a batch panicked (a bug,
	// or an injected crash) and the other Commits of the batch return
	// this. Whether the batch passed its commit point is unknown; the
	// journal settles before the next batch, which applies it if it did,
	// as a remount would.
	ErrCommitPanicked = errors.New("journal: committing the batch panicked")
)
