//go:build race

package runner

// raceEnabled: the race detector makes the model's forward pass and the
// sampler several times slower; long suites scale down under it.
const raceEnabled = true
