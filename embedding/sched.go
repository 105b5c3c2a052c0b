package embedding

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dnnfs/dnnfs/internal/kv"
)

// maxClasses is the number of size classes (queues per device).
const maxClasses = 3

// SchedMode picks the queueing discipline.
type SchedMode int

const (
	// SizeAware: one queue per size class, round-robin (DESIGN.md §Size-aware scheduler).
	SizeAware SchedMode = iota
	// FIFO: one queue for everything, same loaders (the baseline).
	FIFO
)

func (m SchedMode) String() string {
	if m == FIFO {
		return "fifo"
	}
	return "size"
}

// SchedConfig configures the scheduler.
type SchedConfig struct {
	Mode SchedMode
	// Small and Medium are the class thresholds in rows: a request of
	// rows <= Small is class 0, <= Medium class 1, else class 2.
	Small, Medium int
	// MaxPiece bounds one loader transfer (bytes, a multiple of 4096), so
	// a large request never holds a loader for long.
	MaxPiece int
	// Weights are the pieces a class may take per round-robin turn
	// (small, medium, large). 1,1,1 is plain round-robin; the default
	// 16,4,1 favours small requests, whose latency is what suffers behind
	// large ones, without starving any class (in-process, 2 model devices,
	// small at 30% of capacity plus large at 100%: small p99 mixed/alone
	// 10x with 1,1,1, 1.6x with 4,2,1, 1.0x with 16,4,1).
	Weights [maxClasses]int
}

// DefaultSched is the default configuration.
var DefaultSched = SchedConfig{Mode: SizeAware, Small: 128, Medium: 512, MaxPiece: 128 << 10, Weights: [maxClasses]int{16, 4, 1}}

// ParseClassWeights reads the class weights "16,4,1".
func ParseClassWeights(s string) ([maxClasses]int, error) {
	var w [maxClasses]int
	parts, err := kv.List(s)
	if err != nil || len(parts) != maxClasses {
		return w, fmt.Errorf("--class-weights %q: want three weights SMALL,MEDIUM,LARGE, e.g. 16,4,1", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 1000 {
			return w, fmt.Errorf("--class-weights %q: weight %q: want 1 .. 1000", s, p)
		}
		w[i] = n
	}
	return w, nil
}

// ParseSchedMode reads "size" or "fifo".
func ParseSchedMode(s string) (SchedMode, error) {
	switch s {
	case "size", "size-aware":
		return SizeAware, nil
	case "fifo":
		return FIFO, nil
	}
	return 0, fmt.Errorf("--sched %q: want size or fifo", s)
}

// ParseClasses reads the class thresholds "128,512".
func ParseClasses(s string) (small, medium int, err error) {
	parts, err := kv.List(s)
	if err == nil && len(parts) == 2 {
		small, err = strconv.Atoi(parts[0])
		if err == nil {
			medium, err = strconv.Atoi(parts[1])
		}
	}
	if err != nil || len(parts) != 2 || small < 1 || medium <= small {
		return 0, 0, fmt.Errorf("--classes %q: want two row thresholds SMALL,MEDIUM with 1 <= SMALL < MEDIUM, e.g. 128,512", s)
	}
	return small, medium, nil
}

func (c *SchedConfig) class(rows int) int {
	switch {
	case rows <= c.Small:
		return 0
	case rows <= c.Medium:
		return 1
	}
	return 2
}

func (c *SchedConfig) className(i int) string {
	switch i {
	case 0:
		return fmt.Sprintf("small (<=%d rows)", c.Small)
	case 1:
		return fmt.Sprintf("medium (%d-%d rows)", c.Small+1, c.Medium)
	}
	return fmt.Sprintf("large (>%d rows)", c.Medium)
}

// classStats are per size class (also in FIFO mode, where they share one
// queue), for status and benchmarks.
type classStats struct {
	requests, rows, bytes, failed atomic.Uint64
	waiting                       atomic.Int64 // requests none of whose pieces started
	inflight                      atomic.Int64
	queue, service, total         hist
}

// scheduler turns requests into pieces on device queues.
type scheduler struct {
	cfg     SchedConfig
	classes [maxClasses]classStats
}

// request is one scheduled read or write: pieces on one or more devices.
type request struct {
	s       *scheduler
	class   int // size class (statistics)
	queue   int // device queue: the class, or 0 in FIFO mode
	enq     time.Time
	pending atomic.Int32
	first   atomic.Int64 // unix ns the first piece started, 0 = none yet
	mu      sync.Mutex
	err     error
	onDone  func(error)
}

// piece is one device transfer of a request.
type piece struct {
	req   *request
	dev   *Device
	off   int64 // in the backing file
	buf   []byte
	size  int // read pieces: len(buf) to be, until carve allocates it
	write bool
	enq   time.Time
	after func() // on success, before the request may complete (scatter)
}

func (s *scheduler) newRequest(rows, bytes int, onDone func(error)) *request {
	r := &request{s: s, class: s.cfg.class(rows), enq: time.Now(), onDone: onDone}
	if s.cfg.Mode == SizeAware {
		r.queue = r.class
	}
	cs := &s.classes[r.class]
	cs.requests.Add(1)
	cs.rows.Add(uint64(rows))
	cs.bytes.Add(uint64(bytes))
	cs.waiting.Add(1)
	cs.inflight.Add(1)
	return r
}

// dispatch queues the request's pieces on their devices. Completion runs
// on another goroutine even for a request with no pieces, so a submitter
// may hold its own locks across dispatch.
func (s *scheduler) dispatch(r *request, ps []*piece) {
	if len(ps) == 0 {
		r.started(time.Now())
		go r.finish()
		return
	}
	r.pending.Store(int32(len(ps)))
	// Group per device so each device's queue lock is taken once.
	byDev := map[*Device][]*piece{}
	var order []*Device
	for _, p := range ps {
		p.req, p.enq = r, r.enq
		if _, ok := byDev[p.dev]; !ok {
			order = append(order, p.dev)
		}
		byDev[p.dev] = append(byDev[p.dev], p)
	}
	for _, d := range order {
		d.enqueue(r.queue, byDev[d]...)
	}
}

func (r *request) started(t time.Time) {
	if r.first.CompareAndSwap(0, t.UnixNano()) {
		cs := &r.s.classes[r.class]
		cs.waiting.Add(-1)
		cs.queue.add(t.Sub(r.enq))
	}
}

func (p *piece) done(err error) {
	if err == nil && p.after != nil {
		p.after()
	}
	r := p.req
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	if r.pending.Add(-1) == 0 {
		r.finish()
	}
}

func (r *request) finish() {
	now := time.Now()
	cs := &r.s.classes[r.class]
	cs.inflight.Add(-1)
	cs.total.add(now.Sub(r.enq))
	cs.service.add(now.Sub(time.Unix(0, r.first.Load())))
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil {
		cs.failed.Add(1)
	}
	r.onDone(err)
}

// classQueues is one FIFO per size class, taken in weighted round-robin:
// a class's turn is up to its weight of items, then the next non-empty
// class's (the manager's rule, DESIGN.md §Size-aware scheduler; weights
// 1,1,1 are plain round-robin). A device queues pieces on it, a compute
// element requests. Its owner's lock guards it.
type classQueues[T any] struct {
	q      [maxClasses][]T
	n      int // items in all classes
	rr     int // class whose turn it is
	credit int // picks left in that class's turn
}

func (c *classQueues[T]) push(class int, vs ...T) {
	c.q[class] = append(c.q[class], vs...)
	c.n += len(vs)
}

// pop takes the next item; c must hold one. weights[i] is class i's picks
// per turn (0 counts as 1).
func (c *classQueues[T]) pop(weights *[maxClasses]int) T {
	if c.credit <= 0 || len(c.q[c.rr]) == 0 {
		for i := 1; i <= maxClasses; i++ {
			k := (c.rr + i) % maxClasses
			if len(c.q[k]) > 0 {
				c.rr, c.credit = k, max(weights[k], 1)
				break
			}
		}
	}
	q := c.q[c.rr]
	if len(q) == 0 {
		panic("embedding: class queues' count disagrees with the queues")
	}
	v := q[0]
	var zero T
	q[0] = zero
	c.q[c.rr] = q[1:]
	c.n--
	c.credit--
	return v
}

// depths is each class's queue length.
func (c *classQueues[T]) depths() [maxClasses]int {
	var n [maxClasses]int
	for i, q := range c.q {
		n[i] = len(q)
	}
	return n
}
