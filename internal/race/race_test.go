package race_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"fusion/internal/race"
)

// unannotated writes buf from a loop the detector does not see.
//
//go:norace
func unannotated(buf []int) {
	for i := range buf {
		buf[i]++
	}
}

// TestRangesSeeConflicts: two goroutines writing one slice from an
// uninstrumented loop conflict only where a range says so: with
// WriteRange the detector reports the race (in a child process, since a
// report fails the test binary), without it nothing is seen.
func TestRangesSeeConflicts(t *testing.T) {
	if os.Getenv("RACE_CHILD") != "" {
		buf := make([]int, 64)
		done := make(chan bool)
		for range 2 {
			go func() {
				if os.Getenv("RACE_CHILD") == "annotated" {
					race.WriteRange(buf)
				}
				unannotated(buf)
				done <- true
			}()
		}
		<-done
		<-done
		return
	}
	if !race.Enabled {
		// Without -race the ranges are no-ops; the race pass of make
		// test runs the real check.
		race.ReadRange([]int{1})
		race.WriteRange([]int{1})
		return
	}
	for _, tc := range []struct {
		mode     string
		wantRace bool
	}{{"annotated", true}, {"bare", false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRangesSeeConflicts$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RACE_CHILD="+tc.mode, "GORACE=halt_on_error=1")
		out, _ := cmd.CombinedOutput()
		if got := strings.Contains(string(out), "WARNING: DATA RACE"); got != tc.wantRace {
			t.Errorf("%s: race reported %v, want %v:\n%s", tc.mode, got, tc.wantRace, out)
		}
	}
}
