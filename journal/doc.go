// Package journal makes metadata changes atomic across a crash with a
// physical redo log in the pool's journal region. The transaction codec
// is format.EncodeTx/DecodeTx, which the checker decodes with too.
//
// A transaction is a list of (pool offset, bytes) records. Commit:
//
//	step  store                                           then
//	1     header + records into the transaction area      Persist
//	2     8-byte commit word = transaction's sequence no. Persist   <- commit point
//	3     each record's bytes to its target offset        Flush (once per block), one Fence
//	4     8-byte commit word = 0 (retired)                Persist
//
// Group commit: Commit calls that arrive while a batch is being committed
// queue. When that batch is done, the first of them leads the next: it
// takes the longest prefix of the queue that fits the transaction area
// (Capacity) and commits it as one transaction, the records concatenated
// in queue order (a later record wins where two overlap, as Replay applies
// them in order), so the four steps are paid once for all of them. Every
// Commit of a batch returns the batch's result, once it is durable and
// applied, as a lone Commit does: callers holding their locks across
// Commit see no difference, and a crash leaves a prefix of the queue of
// whole transactions. A Commit arriving at an idle journal leads at once,
// alone: nothing waits for company. A transaction larger than Capacity
// fails alone with ErrTooLarge and never queues. Batches counts batches.
//
// Recovery (Replay) after a crash: a zero commit word means nothing to do
// (a crash before step 2 leaves the targets untouched; after step 4 they
// are complete). A non-zero word names a transaction whose records are all
// persisted (step 1 precedes step 2): they are applied again, which is
// idempotent, and the word is cleared.
//
// The byte layout of the region (header, commit word, transaction header,
// records, and what the CRC covers, which lets Replay tell a committed
// transaction from damaged media) is FORMAT.md "Metadata journal", which
// format/format_test.go checks against the codec; it is not repeated here.
//
// A failed persist (the medium's Flush returned an error) never lets a
// transaction count as done when it is not durable. A batch is one
// transaction: every Commit in it gets the same outcome.
//
//	step  fails   then, for every Commit of the batch
//	1     records  Commit fails; nothing was applied, the commit word is 0
//	2     commit   the word is set back to 0 and persisted; Commit fails
//	3     apply    the batch is committed (Replay would finish it): Commit
//	               succeeds, the word stays set and the journal is unsettled
//	4     retire   committed and applied: Commit succeeds, the journal is unsettled
//
// While the journal is unsettled (the media may not hold what the mapping
// shows in its header), every batch first finishes the old transaction
// (re-applies it if its word is set, persists the word as 0), and all its
// Commits fail without writing anything of their own if that fails too.
// A panic while committing (a bug, or an injected crash that the caller
// survives, as the FUSE layer recovers a handler's panic) leaves the
// journal unsettled too, unlocked, and the batch's other Commits failing
// with ErrCommitPanicked.
//
// What it owns: the journal region and its commit protocol. What it must
// not do: know what the records it carries mean, or commit anything that
// is not whole encoded structures (callers stage those).
package journal
