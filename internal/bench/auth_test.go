package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestBenchAuthSmoke(t *testing.T) {
	var out bytes.Buffer
	if err := Auth(context.Background(), AuthOptions{Keys: 10, Peers: 2, Duration: 50 * time.Millisecond}, &out); err != nil {
		t.Fatal(err)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	for _, k := range []string{"bare", "admin_key", "subkey_rate_limited", "subkey_models_and_rate"} {
		var c authCase
		if json.Unmarshal(res[k], &c) != nil || c.Requests == 0 || c.P50ns <= 0 || c.P99ns < c.P50ns {
			t.Fatalf("%s: %s", k, res[k])
		}
	}
	var oe *OptionError
	if err := Auth(context.Background(), AuthOptions{}, &out); !errors.As(err, &oe) {
		t.Fatalf("zero options: %v", err)
	}
}
