package cluster

import (
	"encoding/json"
	"testing"
)

// TestDrainRecordKeepsUnknownFields: a record written by a newer build
// decodes with its unknown fields kept, and encodes them back unchanged
// after an edit; a field this build knows never comes back stale from
// Unknown.
func TestDrainRecordKeepsUnknownFields(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		edit     func(*DrainRecord)
		want     string
	}{
		{"none", `{"node":"a","drain":true,"state":"draining","since":5}`, func(r *DrainRecord) { r.State = DrainStateDrained },
			`{"node":"a","drain":true,"state":"drained","since":5}`},
		{"unknown kept", `{"node":"a","drain":true,"state":"drained","future":{"x":[1,2]},"zeta":"z"}`, func(r *DrainRecord) { r.Drain, r.State = false, "" },
			`{"drain":false,"future":{"x":[1,2]},"node":"a","zeta":"z"}`},
		{"known emptied stays empty", `{"node":"a","drain":true,"state":"drained","since":7,"future":1}`, func(r *DrainRecord) { r.State, r.Since = "", 0 },
			`{"drain":true,"future":1,"node":"a"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r DrainRecord
			if err := json.Unmarshal([]byte(tc.in), &r); err != nil {
				t.Fatal(err)
			}
			tc.edit(&r)
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}
