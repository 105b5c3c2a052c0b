package embedding

import (
	"container/heap"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper wakes goroutines at precise deadlines for the device models.
// Go's timers round short sleeps up to about a millisecond here, and a
// loader sleeping in nanosleep(2) would pin one of the few Ps in a system
// call. Instead the loaders park on channels, and one goroutine reads a
// timerfd (nanosecond resolution) through Go's netpoller, which holds no
// P while it waits; the timer is re-armed whenever a nearer deadline
// arrives.
type sleeper struct {
	once sync.Once
	mu   sync.Mutex
	q    deadlines
	tfd  int
	f    *os.File
	ok   bool
}

type deadline struct {
	at time.Time
	ch chan struct{}
}

type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

var modelSleeper sleeper

// until blocks until t.
func (s *sleeper) until(t time.Time) {
	s.once.Do(s.start)
	if !s.ok {
		time.Sleep(time.Until(t))
		return
	}
	ch := make(chan struct{})
	s.mu.Lock()
	heap.Push(&s.q, deadline{t, ch})
	if s.q[0].ch == ch {
		s.armLocked()
	}
	s.mu.Unlock()
	<-ch
}

// armLocked sets the timer to the earliest deadline (relative time: the
// timerfd's clock and time.Now's monotonic reading tick alike).
func (s *sleeper) armLocked() {
	d := max(time.Until(s.q[0].at), time.Microsecond)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	unix.TimerfdSettime(s.tfd, 0, &spec, nil)
}

func (s *sleeper) start() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return
	}
	s.tfd, s.f, s.ok = fd, os.NewFile(uintptr(fd), "dnnfs-model-timer"), true
	go s.loop()
}

func (s *sleeper) loop() {
	var buf [8]byte
	for {
		if _, err := s.f.Read(buf[:]); err != nil {
			time.Sleep(time.Millisecond) // not pollable after all: poll coarsely
		}
		now := time.Now()
		s.mu.Lock()
		for len(s.q) > 0 && !s.q[0].at.After(now) {
			close(heap.Pop(&s.q).(deadline).ch)
		}
		if len(s.q) > 0 {
			s.armLocked()
		}
		s.mu.Unlock()
	}
}
