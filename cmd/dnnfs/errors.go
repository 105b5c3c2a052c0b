package main

import "errors"

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
