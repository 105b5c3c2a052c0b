package main

import (
	"errors"
	"strings"

	"github.com/dnnfs/dnnfs/core"
)

// The command's errors: main turns them into the exit status (a usage
// error 2, an exitError its code, anything else 1) and one line on stderr
// naming the command.

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError carries a specific exit code (fsck: 1 = problems found).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// errCollected is returned by parse while flagsOf runs a run function
// only to learn its flags: it stops the function there. Never shown.
var errCollected = errors.New("dnnfs: flags collected")

// notPoolText is how the command says that a file is not a pool, after
// its path: the words of core.ErrNotPool without the "format: " prefix its
// text carries for logs.
const notPoolText = "not a dnnfs pool"

// poolError is "PATH: err" for a pool that could not be opened, checked or
// recovered. It wraps err; not being a pool reads as notPoolText.
func poolError(path string, err error) error {
	msg := path + ": " + err.Error()
	if errors.Is(err, core.ErrNotPool) {
		msg = path + ": " + strings.Replace(err.Error(), core.ErrNotPool.Error(), notPoolText, 1)
	}
	return &pathError{msg, err}
}

// pathError is an error told after the path it concerns, in the
// command's words (poolError).
type pathError struct {
	msg string
	err error
}

func (e *pathError) Error() string { return e.msg }
func (e *pathError) Unwrap() error { return e.err }
