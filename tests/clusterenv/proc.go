package clusterenv

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// proc is one engine process this package started (an etcd member,
// versitygw): killed only by its own pid.
type proc struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
}

// launch starts bin with args, its stdout and stderr in the file logPath.
// The process dies with the test process even when the test binary is
// killed before its cleanups run (Pdeathsig).
func (p *proc) launch(bin string, args []string, logPath string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// done is closed once the last launched process has exited (nil before
// the first launch).
func (p *proc) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// pid is the running process's id, or 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// kill sends SIGKILL to the running process by its pid and waits until it
// has exited; nothing to do when none runs.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	<-exited
	return nil
}
