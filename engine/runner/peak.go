package runner

// notePeak records total as a candidate peak and returns the peak so far.
func (r *Runner) notePeak(total int64) int64 {
	for {
		p := r.peak.Load()
		if total <= p {
			return p
		}
		if r.peak.CompareAndSwap(p, total) {
			return total
		}
	}
}
