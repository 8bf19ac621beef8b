package transport

import (
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
)

// pollGrace is how long after an application's last Poll the engine
// goroutines stand aside: they leave the link to the poller, so that a
// frame costs no goroutine wake-up and the two do not race for it, and
// they wake only for the engine's deadlines. Past it they wait on the
// link again: an application that stops polling loses at most this much
// to the hand-back (TestPollStopsResumes).
const pollGrace = time.Millisecond

// bulkFrames is the most frames a step moves, in and out, for its engine
// still to count as carrying small messages: an engine that moved more
// within pollGrace carries a stream, whose packets its goroutine keeps
// taking from the link while the application polls. A polling thread
// that the host's scheduler takes away would otherwise hold up the
// stream's acknowledgements, and the peer's sending, until the grace
// ran out; a small message's round trip is what a goroutine woken per
// packet would cost most.
const bulkFrames = 16

// Poll makes progress on the caller's goroutine and never blocks: on each
// engine that no other goroutine is stepping, it hands over the buffers
// of PostRecv, receives what the link holds, hands completions to the CQ
// and messages to Recv, transmits what is due and runs the timers that
// fell due. It reports whether it found work.
//
// An application that polls (a loop over Poll, CQ().Poll and Recv with
// a done context) gets its messages and completions without a goroutine
// woken to carry them. While it keeps calling Poll, at most a
// millisecond apart, the engine goroutines stand aside and run only the
// engines' deadlines, unless their engine carries a stream (bulkFrames):
// then they keep taking packets from the link too, whichever comes
// first. When the application stops polling they take over within that
// millisecond (at once after StopPolling), so that progress never
// depends on Poll. Poll is safe for concurrent use; it steps only links
// whose wait splits (link.WaitSplitter: UDP, AF_XDP, AF_PACKET, mem), and
// does nothing on others. After Close it returns an error wrapping
// ErrClosed.
func (ep *Endpoint) Poll() (bool, error) {
	work := false
	for _, s := range ep.shards {
		w, err := s.pollStep()
		if err != nil {
			return work, err
		}
		work = work || w
	}
	return work, nil
}

// StopPolling tells the engine goroutines that the application stopped
// polling (it is about to block, in CQ().Wait or Recv): they take over at
// once rather than when the grace after its last Poll ends. Safe for
// concurrent use; without an earlier Poll it does nothing.
func (ep *Endpoint) StopPolling() {
	for _, s := range ep.shards {
		if s.polled.Swap(0) != 0 {
			s.kickAside()
		}
	}
}

// pollStep is one engine's share of Poll.
func (s *epShard) pollStep() (bool, error) {
	now := s.ep.clk.Now()
	s.polled.Store(int64(now))
	if s.split == nil || !s.st.TryLock() {
		return false, nil
	}
	defer s.st.Unlock()
	if s.isClosing() {
		return false, s.ep.closedErr()
	}
	if s.stepErr != nil {
		return false, s.stepErr
	}
	posted := s.takePosts()
	work, err := s.step(now)
	if err != nil {
		s.stepErr = err // the engine goroutine stops on it
		s.eng.link.Wake()
		s.kickAside()
		return false, err
	}
	work = work || posted
	switch {
	case work:
		s.flushOwed = true
	case s.flushOwed && !s.linkWait.Load():
		// The link's wait flushes what its sends left for a later kick
		// (AF_XDP's KickDelay); the engine goroutine would do it before
		// it sleeps, but it stands aside, and it is not in Block.
		s.flushOwed = false
		_, ready, err := s.split.PrepareWait(0)
		if err != nil {
			s.stepErr = err
			s.eng.link.Wake()
			s.kickAside()
			return false, err
		}
		work = ready
	}
	if !s.wakeAside() && work && s.eng.NextDeadline() < s.until {
		// The goroutine sleeps on the link until a later deadline than
		// this step planned. (Its next turn, on the link's news, finds
		// the polling and stands aside.)
		s.wake()
	}
	return work, nil
}

// asideFor reports, under st, whether the application polled within
// pollGrace and so the engine goroutine stands aside; if so it notes
// until when (the grace's end or the engine's next deadline) and returns
// the time to sleep, 0 or less when a deadline is due.
func (s *epShard) asideFor() (time.Duration, bool) {
	p := s.polled.Load()
	if s.split == nil || p == 0 {
		return 0, false
	}
	now := s.ep.clk.Now()
	end := clock.Time(p).Add(pollGrace)
	if end <= now || now.Sub(s.bulkAt) < pollGrace {
		return 0, false
	}
	until := clock.Min(end, s.eng.NextDeadline())
	s.aside, s.until = true, until
	return until.Sub(now), true
}

// standAside sleeps for d or until kickAside, off the link. It quiets
// the link first (link.Quieter): each frame the poller takes would
// otherwise wake a thread asleep in the runtime's poller, at the cost of
// a context switch here and of the wake-up in the sender's system call;
// the engine's next wait on the link watches it again
// (TestStandAsideQuietsLink).
func (s *epShard) standAside(d time.Duration) {
	if d <= 0 {
		return
	}
	if q, ok := s.eng.link.(link.Quieter); ok {
		q.Quiet()
	}
	s.asides.Add(1)
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	select {
	case <-s.kick:
		s.timer.Stop()
	case <-s.timer.C:
	}
}

// kickAside ends the sleep of a goroutine standing aside, or its next
// one. Safe from any goroutine.
func (s *epShard) kickAside() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// wakeAside reports, under st after a step on a caller's goroutine,
// whether the engine goroutine stands aside, and kicks it if the engine's
// next deadline now comes before the one it sleeps to.
func (s *epShard) wakeAside() bool {
	if !s.aside {
		return false
	}
	if s.eng.NextDeadline() < s.until {
		s.kickAside()
	}
	return true
}
