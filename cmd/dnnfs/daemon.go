package main

// Daemon mode: `dnnfs mount` without -f returns once the mount is live,
// as sshfs and libfuse's fuse_daemonize do. Go cannot fork, so the command
// runs itself again in a new session with the write end of a pipe; the
// child mounts and writes "ready" once the mount serves, and the parent
// exits 0. A child that fails says why on the stderr both share and exits,
// and the parent exits with its code.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// readyFDEnv names, in the child's environment, the descriptor of the
// pipe on which it reports readiness.
const readyFDEnv = "DNNFS_MOUNT_READY_FD"

const readyMsg = "ready\n"

// takeReadyPipe returns the readiness pipe when this process is the child
// of a backgrounding mount, else nil. The variable is removed so nothing
// the daemon starts inherits it.
func takeReadyPipe() *os.File {
	v, ok := os.LookupEnv(readyFDEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(readyFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "readiness pipe")
}

// mountInBackground runs `dnnfs mount args` as a daemon and waits until it
// reports the mount live (nil) or exits (an exitError with its code; its
// reason is already on stderr).
func mountInBackground(args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the daemon: %w (or mount with -f)", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, append([]string{"mount"}, args...)...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // until the child is ready
	cmd.ExtraFiles = []*os.File{w}                // fd 3
	// Its own session: no terminal, and the terminal's signals (Ctrl-C,
	// hang-up) no longer reach it once it runs on its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("starting the daemon: %w", err)
	}
	// Interrupted while the mount comes up: the child stops too (it
	// unmounts if it got that far) and we report how it ended.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for range sigs {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	said, _ := io.ReadAll(r)
	if string(said) == readyMsg {
		return nil // the daemon runs on; never reaped by us
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitError{code: 1, msg: "the daemon exited before the mount was live"}
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return exitError{code: ee.ExitCode()}
	default:
		return fmt.Errorf("the daemon ended before the mount was live: %v", err)
	}
}

// defaultLogFile is where a daemon without --log-file logs once it runs
// on its own: /var/log/dnnfs.log for root, else under $XDG_STATE_HOME.
func defaultLogFile() string {
	if os.Geteuid() == 0 {
		return "/var/log/dnnfs.log"
	}
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "dnnfs", "dnnfs.log")
}

// announceReady says the mount is live: to systemd (READY=1 on
// $NOTIFY_SOCKET, when set) and, in a backgrounded child, to the waiting
// parent, after leaving the parent's terminal or pipes: stdin reads
// /dev/null, stdout and stderr (the log, without --log-file, and any panic)
// go to the log file, and the working directory is / so that no file
// system stays busy because of the daemon.
func announceReady(ready *os.File, logFile string, log *zap.Logger) {
	if ready != nil {
		if logFile == "" {
			logFile = defaultLogFile()
		}
		if err := redirectStdio(logFile); err != nil {
			log.Warn("the daemon's log is lost: no log file (give --log-file)", zap.String("log_file", logFile), zap.Error(err))
			_ = redirectStdio("")
		}
		_ = os.Chdir("/")
		if _, err := io.WriteString(ready, readyMsg); err != nil {
			log.Warn("could not tell the mount command that the mount is live", zap.Error(err))
		}
		ready.Close()
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("could not notify systemd that the mount is live", zap.String("NOTIFY_SOCKET", os.Getenv("NOTIFY_SOCKET")), zap.Error(err))
	}
}

// notifyStopping tells systemd (if it started us) that the daemon is
// shutting down on its own terms.
func notifyStopping() { _, _ = daemon.SdNotify(false, daemon.SdNotifyStopping) }

// redirectStdio points stdin at /dev/null and stdout and stderr at
// logFile (appended to), or at /dev/null when logFile is "".
func redirectStdio(logFile string) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	out := null
	if logFile != "" {
		if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	for fd, f := range []*os.File{null, out, out} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}
