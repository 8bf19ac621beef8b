package transport

import "github.com/sprayfabric/spray/clock"

// An engine's schedule keeps its work proportional to what moves, not to
// the QPs it holds. Every QP of an engine is at any time in exactly one of
// two places:
//
//   - the ready list, a FIFO of QPs that may have something to do: a packet
//     to send, an acknowledgement owed, a timer due. A QP joins it when it
//     receives a packet, when a timer of its fires, and when the
//     application changes it (Post, PostRecv, Connect, taking a received
//     message: QP.touch). output polls the list round robin, running a
//     QP's expired timers before its first poll of a step, and a QP leaves
//     the list when PollTransmit has nothing more;
//   - otherwise, the timer heap, keyed on its NextTimeout as computed when
//     it left the ready list (absent when that is clock.Never). Nothing but
//     the engine's own calls and those that touch it change a QP's
//     NextTimeout, so the key stays exact; an expired key puts the QP back
//     on the ready list.
//
// A QP that may hold completions (it was touched, or PollTransmit left
// some) is also on the completion list, which Completions and the
// endpoint's dispatch drain instead of visiting every QP. No step passes
// over a whole list but output's: with every QP busy (an all-to-all), a
// step still costs what it moves. TestStepVisitsActiveQPs guards the cost; the transport's transfer
// and golden tests that a QP with work is never passed over.

// qpSched is a QP's place in its engine's schedule.
type qpSched struct {
	eng      *Engine    // nil: on no engine, or destroyed
	ready    bool       // on eng.ready
	compl    bool       // on eng.compl
	heapIdx  int        // index in eng.timers, -1 when not there
	order    int        // index in eng.order
	deadline clock.Time // key in eng.timers
	timed    uint64     // the engine's step in which its timers were last checked
}

// touch puts the QP on its engine's ready and completion lists: a packet
// or a call from outside the engine changed it, and it may now have
// something to send, a new deadline or completions.
func (q *QP) touch() {
	e := q.sch.eng
	if e == nil {
		return
	}
	if !q.sch.ready {
		e.makeReady(q)
	}
	if !q.sch.compl {
		q.sch.compl = true
		e.compl = append(e.compl, q)
	}
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

// makeReady appends q, which is not on it, to the ready list.
func (e *Engine) makeReady(q *QP) {
	if q.sch.heapIdx >= 0 {
		e.heapRemove(q.sch.heapIdx)
	}
	q.sch.ready = true
	e.ready = append(e.ready, q)
}

// readyLen returns the number of entries on the ready list (destroyed QPs
// included until popped).
func (e *Engine) readyLen() int { return len(e.ready) - e.readyHead }

// popReady removes the front of the ready list.
func (e *Engine) popReady() {
	e.ready[e.readyHead] = nil
	e.readyHead++
	switch {
	case e.readyHead == len(e.ready):
		e.ready, e.readyHead = e.ready[:0], 0
	case e.readyHead >= 256 && 2*e.readyHead >= len(e.ready):
		n := copy(e.ready, e.ready[e.readyHead:])
		clear(e.ready[n:])
		e.ready, e.readyHead = e.ready[:n], 0
	}
}

// unready takes q, just popped off the ready list, to the timer heap under
// its new deadline, and to the completion list if it holds completions.
func (e *Engine) unready(q *QP) {
	q.sch.ready = false
	e.visits++
	if d := q.NextTimeout(); d != clock.Never {
		q.sch.deadline = d
		e.heapPush(q)
	}
	e.noteCompl(q)
}

// noteCompl puts q on the completion list if it holds completions.
func (e *Engine) noteCompl(q *QP) {
	if !q.sch.compl && q.hasCompletions() {
		q.sch.compl = true
		e.compl = append(e.compl, q)
	}
}

// runTimers starts a step: it moves the QPs whose deadline passed to the
// ready list and runs their expired timers. The timers of the QPs already
// on the list run when output reaches them, before their first poll of the
// step (checkTimers): a step does not pass over the whole list twice.
func (e *Engine) runTimers(now clock.Time) {
	e.stepNo++
	for len(e.timers) > 0 && e.timers[0].sch.deadline <= now {
		q := e.timers[0]
		e.heapRemove(0)
		q.touch()
		e.checkTimers(q, now)
	}
}

// checkTimers runs q's expired timers, once per step.
func (e *Engine) checkTimers(q *QP, now clock.Time) {
	q.sch.timed = e.stepNo
	e.visits++
	if now >= q.NextTimeout() {
		e.visits++
		q.HandleTimeout(now)
	}
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

// The timer heap: a binary min-heap on qpSched.deadline whose entries know
// their index, so that a QP leaves it in O(log n) when it becomes ready or
// is destroyed.

func (e *Engine) heapPush(q *QP) {
	q.sch.heapIdx = len(e.timers)
	e.timers = append(e.timers, q)
	e.heapUp(q.sch.heapIdx)
}

func (e *Engine) heapRemove(i int) {
	h := e.timers
	q := h[i]
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		h[i].sch.heapIdx = i
	}
	h[last] = nil
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
	for i > 0 {
		p := (i - 1) / 2
		if h[p].sch.deadline <= h[i].sch.deadline {
			break
		}
		h[p], h[i] = h[i], h[p]
		h[p].sch.heapIdx, h[i].sch.heapIdx = p, i
		i = p
	}
}

// heapDown sifts entry i down and reports whether it moved.
func (e *Engine) heapDown(i int) bool {
	h := e.timers
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].sch.deadline < h[l].sch.deadline {
			m = r
		}
		if h[i].sch.deadline <= h[m].sch.deadline {
			break
		}
		h[i], h[m] = h[m], h[i]
		h[i].sch.heapIdx, h[m].sch.heapIdx = i, m
		i = m
	}
	return i > start
}
