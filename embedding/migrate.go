package embedding

import (
	"sync"
	"sync/atomic"
	"time"
)

// migrator is the background balancer (SEEDS.md §2 migration module).
type migrator struct {
	t     *Tier
	every time.Duration
	stopc chan struct{}
	wg    sync.WaitGroup

	moves, replications atomic.Uint64
}

func (m *migrator) start(t *Tier, every time.Duration) {
	m.t, m.every = t, every
	if every <= 0 {
		return
	}
	m.stopc = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-m.stopc:
				return
			case <-tk.C:
				m.t.balance()
			}
		}
	}()
}

func (m *migrator) stop() {
	if m.stopc != nil {
		close(m.stopc)
		m.wg.Wait()
		m.stopc = nil
	}
}

// balance is one migrator pass (filled in by the migration change).
func (t *Tier) balance() {}
