package transport

import "github.com/sprayfabric/spray/clock"

// An engine's schedule keeps its work proportional to what moves, not to
// the QPs it holds. It has three parts:
//
//   - the ready list, a FIFO of QPs that may have something to send: a
//     packet, an acknowledgement owed. A QP joins it when it receives a
//     packet, when a deadline of its passes, and when the application
//     changes it (Post, PostRecv, Connect, taking a received message:
//     QP.touch). output polls the list round robin, a QP leaving it when
//     PollTransmit has nothing more;
//   - the timer heap, keyed on a QP's next deadline: for a QP on the ready
//     list, when its timers next expire (QP.timerDeadline: retransmission,
//     trimming), which HandleTimeout serves; for any other, NextTimeout,
//     which adds the times pacing, a delayed acknowledgement or, for a QP
//     with data, congestion control's rate timer let it send (a QP on the
//     ready list runs that timer when PollTransmit reads its rate, so
//     DCQCN's timers wake no QP that waits its turn or has nothing to
//     send: TestLazyCCTimers). A QP whose deadline is clock.Never is
//     not in it. runTimers pops the expired keys at the start of a step,
//     runs their QPs' timers and puts them on the ready list, so a step
//     runs only the timers that expire, whether or not the link has a
//     transmit buffer, and NextDeadline is the heap's top;
//   - the dirty list, the QPs whose key may be stale: every call that
//     changes a QP (a packet handled, a poll that sent, a timer run, a
//     touch) marks it, and settle recomputes the keys of the marked QPs
//     before the heap is read (runTimers, the end of transmit,
//     NextDeadline). Nothing else changes a QP's deadlines, so the keys
//     are exact when read.
//
// A QP that may hold completions (it was touched, or PollTransmit left
// some) is also on the completion list, which Completions and the
// endpoint's dispatch drain instead of visiting every QP. No step passes
// over a whole list: with every QP busy (an all-to-all) and the link out
// of transmit buffers, a step costs the packets it moves, the QPs they
// belong to and the timers that expire. TestStepVisitsActiveQPs and
// TestStepNoBufferVisits guard the cost; TestSchedMatchesFullPass and the
// transport's transfer and golden tests that a QP with work is never
// passed over.

// qpSched is a QP's place in its engine's schedule.
type qpSched struct {
	eng    *Engine // nil: on no engine, or destroyed
	ready  bool    // on eng.ready
	compl  bool    // on eng.compl
	dirty  bool    // on eng.dirty
	ctrl   bool    // on eng.ctrl
	repair bool    // on eng.repair
	// repairSent counts the resends of the QP's turn on eng.repair.
	repairSent uint8
	heapIdx    int        // index in eng.timers, -1 when not there
	order      int        // index in eng.order
	deadline   clock.Time // key in eng.timers
}

// touch puts the QP on its engine's ready, completion and dirty lists: a
// packet or a call from outside the engine changed it, and it may now have
// something to send, a new deadline or completions.
func (q *QP) touch() {
	e := q.sch.eng
	if e == nil {
		return
	}
	if !q.sch.ready {
		q.sch.ready = true
		e.ready = append(e.ready, q)
	}
	if !q.sch.compl {
		q.sch.compl = true
		e.compl = append(e.compl, q)
	}
	e.markDirty(q)
}

// hasCompletions reports whether the QP holds completions to hand out.
func (q *QP) hasCompletions() bool { return len(q.comps) > 0 || q.recvLen > 0 }

// schedInit places a new QP on the engine: in creation order, on no list.
func (e *Engine) schedInit(q *QP) {
	q.sch = qpSched{eng: e, heapIdx: -1, order: len(e.order)}
	e.order = append(e.order, q)
}

// schedRemove takes a destroyed QP out of the schedule: out of the heap and
// the creation order at once, out of the lists when they next reach it.
func (e *Engine) schedRemove(q *QP) {
	if q.sch.eng != e {
		return
	}
	if q.sch.heapIdx >= 0 {
		e.heapRemove(q.sch.heapIdx)
	}
	e.order[q.sch.order] = nil
	e.holes++
	if e.holes > 32 && 2*e.holes > len(e.order) {
		n := 0
		for _, o := range e.order {
			if o != nil {
				o.sch.order = n
				e.order[n] = o
				n++
			}
		}
		clear(e.order[n:])
		e.order, e.holes = e.order[:n], 0
	}
	q.sch.eng = nil
}

// markDirty puts q on the dirty list: its key is recomputed at the next
// settle.
func (e *Engine) markDirty(q *QP) {
	if !q.sch.dirty {
		q.sch.dirty = true
		e.dirty = append(e.dirty, q)
	}
}

// settle recomputes the timer heap's keys of the QPs on the dirty list
// and empties it.
func (e *Engine) settle() {
	for i, q := range e.dirty {
		e.dirty[i] = nil
		q.sch.dirty = false
		if q.sch.eng != e { // destroyed
			continue
		}
		e.visits++
		var d clock.Time
		if q.sch.ready {
			d = q.timerDeadline()
		} else {
			d = q.NextTimeout()
		}
		e.rekey(q, d)
	}
	e.dirty = e.dirty[:0]
}

// rekey sets q's key in the timer heap to d, taking it out for
// clock.Never.
func (e *Engine) rekey(q *QP, d clock.Time) {
	switch {
	case d == clock.Never:
		if q.sch.heapIdx >= 0 {
			e.heapRemove(q.sch.heapIdx)
		}
	case q.sch.heapIdx < 0:
		q.sch.deadline = d
		e.heapPush(q)
	case q.sch.deadline != d:
		q.sch.deadline = d
		e.timers[q.sch.heapIdx].at = d
		if !e.heapDown(q.sch.heapIdx) {
			e.heapUp(q.sch.heapIdx)
		}
	}
}

// readyLen returns the number of entries on the ready list (destroyed QPs
// included until popped).
func (e *Engine) readyLen() int { return len(e.ready) - e.readyHead }

// popReady removes the front of the ready list; the next QP's turn starts.
func (e *Engine) popReady() {
	e.ready[e.readyHead] = nil
	e.readyHead++
	e.turn = 0
	switch {
	case e.readyHead == len(e.ready):
		e.ready, e.readyHead = e.ready[:0], 0
	case e.readyHead >= 256 && 2*e.readyHead >= len(e.ready):
		n := copy(e.ready, e.ready[e.readyHead:])
		clear(e.ready[n:])
		e.ready, e.readyHead = e.ready[:n], 0
	}
}

// unready takes q, just popped off the ready list, off it: its key
// becomes its NextTimeout at the next settle, and it joins the completion
// list if it holds completions.
func (e *Engine) unready(q *QP) {
	q.sch.ready = false
	e.markDirty(q)
	e.noteCompl(q)
}

// noteCompl puts q on the completion list if it holds completions.
func (e *Engine) noteCompl(q *QP) {
	if !q.sch.compl && q.hasCompletions() {
		q.sch.compl = true
		e.compl = append(e.compl, q)
	}
}

// runTimers starts a step: it settles the keys that changed since the
// last, then moves every QP whose key passed to the ready list and runs
// its expired timers. The engine did not run from stalled to now (now
// when it did): a QP whose key passed in that time restarts its loss
// timers instead (QP.restartTimers); runTimers returns how many did.
func (e *Engine) runTimers(now, stalled clock.Time) int {
	restarted := 0
	if e.credit != nil {
		e.credit.run(e, now)
	}
	e.settle()
	for len(e.timers) > 0 && e.timers[0].at <= now {
		q := e.timers[0].q
		at := e.timers[0].at
		e.heapRemove(0)
		q.touch()
		e.visits++
		if at > stalled && q.restartTimers(now) {
			e.stats.TimersRestarted++
			restarted++
		}
		if now >= q.NextTimeout() {
			e.visits++
			q.HandleTimeout(now)
			e.hostFlight(q)
		}
		e.noteCtrl(q, now)
		e.noteRepair(q)
	}
	return restarted
}

// takeCompl returns the QPs that may hold completions and empties the
// completion list; give the slice back with putCompl.
func (e *Engine) takeCompl() []*QP {
	list := e.compl
	e.compl = e.complSpare[:0]
	for _, q := range list {
		q.sch.compl = false
	}
	return list
}

// putCompl gives back the slice takeCompl returned.
func (e *Engine) putCompl(list []*QP) {
	clear(list)
	e.complSpare = list[:0]
}

// The timer heap: a binary min-heap of QPs and their keys, the key beside
// the pointer so that sifting compares without touching the QPs (a
// host's engine holds a QP per peer, and a paced QP goes through the heap
// once per packet); each QP knows its index, so that it leaves in
// O(log n) when it is destroyed or its key changes.

// timerEntry is a QP in the timer heap under its key.
type timerEntry struct {
	at clock.Time
	q  *QP
}

func (e *Engine) heapPush(q *QP) {
	q.sch.heapIdx = len(e.timers)
	e.timers = append(e.timers, timerEntry{q.sch.deadline, q})
	e.heapUp(q.sch.heapIdx)
}

func (e *Engine) heapRemove(i int) {
	h := e.timers
	q := h[i].q
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		h[i].q.sch.heapIdx = i
	}
	h[last] = timerEntry{}
	e.timers = h[:last]
	q.sch.heapIdx = -1
	if i != last {
		if !e.heapDown(i) {
			e.heapUp(i)
		}
	}
}

func (e *Engine) heapUp(i int) {
	h := e.timers
	x := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= x.at {
			break
		}
		h[i] = h[p]
		h[i].q.sch.heapIdx = i
		i = p
	}
	h[i] = x
	x.q.sch.heapIdx = i
}

// heapDown sifts entry i down and reports whether it moved.
func (e *Engine) heapDown(i int) bool {
	h := e.timers
	start := i
	x := h[i]
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].at < h[l].at {
			m = r
		}
		if x.at <= h[m].at {
			break
		}
		h[i] = h[m]
		h[i].q.sch.heapIdx = i
		i = m
	}
	h[i] = x
	x.q.sch.heapIdx = i
	return i > start
}
