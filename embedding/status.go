package embedding

import "fmt"

// ClassStatus is one size class.
type ClassStatus struct {
	Name         string  `json:"name"`
	QueuedPieces int     `json:"queued_pieces"`
	Waiting      int64   `json:"waiting_requests"` // no piece started yet
	InFlight     int64   `json:"in_flight_requests"`
	Requests     uint64  `json:"requests"`
	Failed       uint64  `json:"failed"`
	Rows         uint64  `json:"rows"`
	Bytes        uint64  `json:"bytes"`
	Queue        Latency `json:"queue"`
	Service      Latency `json:"service"`
	Total        Latency `json:"total"`
}

// DeviceStatus is one device.
type DeviceStatus struct {
	ID         uint16     `json:"id"`
	Dir        string     `json:"dir"`
	Model      string     `json:"model"`
	Channels   int        `json:"channels"`
	Queued     [3]int     `json:"queued_pieces_by_class"`
	InFlight   int64      `json:"in_flight_pieces"`
	Reads      uint64     `json:"reads"`
	ReadBytes  uint64     `json:"read_bytes"`
	Writes     uint64     `json:"writes"`
	WriteBytes uint64     `json:"write_bytes"`
	Errors     uint64     `json:"errors"`
	Latency    Latency    `json:"piece_latency"` // queue + service
	Service    Latency    `json:"piece_service"`
	Space      SpaceStats `json:"space"`
	Shards     int        `json:"shard_copies"`
	Moves      uint64     `json:"moves_in"`
}

// Status is the tier's state for `dnnfs status`.
type Status struct {
	Sched             string         `json:"sched"`
	Weights           [3]int         `json:"class_weights"`
	MaxPiece          int            `json:"max_piece"`
	Classes           []ClassStatus  `json:"classes"`
	Devices           []DeviceStatus `json:"devices"`
	Tables            int            `json:"tables"`
	Shards            int            `json:"shards"`
	Replicas          int            `json:"replicas"`
	Moves             uint64         `json:"moves"`
	Replications      uint64         `json:"replications"`
	UsefulBytes       uint64         `json:"useful_bytes"`
	BackingReadBytes  uint64         `json:"backing_read_bytes"`
	ReadAmplification float64        `json:"read_amplification"` // backing bytes read per useful byte
	Compute           ComputeStatus  `json:"compute"`
}

func (m Model) String() string {
	if m.BW == 0 && m.Lat == 0 {
		return "native"
	}
	return fmt.Sprintf("bw=%.0fMiB/s,lat=%s", m.BW/(1<<20), m.Lat)
}

// Status snapshots counters and queues.
func (t *Tier) Status() Status {
	s := Status{Sched: t.sched.cfg.Mode.String(), MaxPiece: t.sched.cfg.MaxPiece, Weights: t.sched.cfg.Weights}
	perDev := map[uint16]int{}
	t.mu.Lock()
	s.Tables = len(t.tables)
	for _, tb := range t.tables {
		for i := range tb.shards {
			e := tb.shards[i].cur.Load().e
			s.Shards++
			perDev[uint16(e.Dev)]++
			if e.RDev != 0 {
				s.Replicas++
				perDev[uint16(e.RDev)]++
			}
		}
	}
	t.mu.Unlock()
	var depth [maxClasses]int
	for _, d := range t.att {
		q := d.classDepths()
		for i := range q {
			depth[i] += q[i]
		}
		ds := DeviceStatus{ID: uint16(d.ID), Dir: d.Dir, Model: d.model.String(), Channels: d.model.Channels, Queued: q,
			InFlight: d.inflight.Load(), Reads: d.reads.Load(), ReadBytes: d.readBytes.Load(), Writes: d.writes.Load(),
			WriteBytes: d.writeBytes.Load(), Errors: d.errors.Load(), Latency: d.lat.summary(), Service: d.svc.summary(),
			Space: d.space.stats(), Shards: perDev[uint16(d.ID)], Moves: d.moves.Load()}
		s.Devices = append(s.Devices, ds)
		s.BackingReadBytes += ds.ReadBytes
	}
	for i := range t.sched.classes {
		c := &t.sched.classes[i]
		s.Classes = append(s.Classes, ClassStatus{Name: t.sched.cfg.className(i), QueuedPieces: depth[i],
			Waiting: c.waiting.Load(), InFlight: c.inflight.Load(), Requests: c.requests.Load(), Failed: c.failed.Load(),
			Rows: c.rows.Load(), Bytes: c.bytes.Load(), Queue: c.queue.summary(), Service: c.service.summary(), Total: c.total.summary()})
	}
	s.Moves, s.Replications = t.mig.moves.Load(), t.mig.replications.Load()
	s.UsefulBytes = t.useful.Load()
	s.Compute = t.compute.status()
	if s.UsefulBytes > 0 {
		s.ReadAmplification = float64(s.BackingReadBytes) / float64(s.UsefulBytes)
	}
	return s
}

// ResetStats clears the latency histograms and counters (benchmarks
// measure one phase at a time).
func (t *Tier) ResetStats() {
	for i := range t.sched.classes {
		c := &t.sched.classes[i]
		c.queue.reset()
		c.service.reset()
		c.total.reset()
		c.requests.Store(0)
		c.rows.Store(0)
		c.bytes.Store(0)
		c.failed.Store(0)
	}
	for _, d := range t.att {
		d.lat.reset()
		d.svc.reset()
		d.readBytes.Store(0)
		d.reads.Store(0)
	}
	t.useful.Store(0)
	if t.compute != nil {
		t.compute.wait.reset()
	}
}
