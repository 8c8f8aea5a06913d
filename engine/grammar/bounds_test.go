package grammar

import (
	"testing"
)

// TestNumberBounds: a bounded number takes exactly the documents the
// validator accepts, among hand-picked edge cases.
func TestNumberBounds(t *testing.T) {
	tests := []struct {
		schema string
		ok     []string
		bad    []string
	}{
		{`{"type":"integer","minimum":-5,"maximum":1234}`, []string{"-5", "0", "-0", "9", "10", "99", "100", "999", "1000", "1234", "1199"}, []string{"-6", "1235", "1300", "2000", "12345", "01", "1.0"}},
		{`{"type":"integer","exclusiveMinimum":0}`, []string{"1", "999999999999999"}, []string{"0", "-1", "1000000000000000"}},
		{`{"type":"integer","minimum":1.5,"exclusiveMaximum":7.5}`, []string{"2", "7"}, []string{"1", "8"}},
		{`{"type":"number","minimum":0,"exclusiveMaximum":10}`, []string{"0", "0.5", "9.999", "9"}, []string{"10", "10.0", "-0.1", "-1", "1e3"}},
		{`{"type":"number","exclusiveMinimum":2,"maximum":3}`, []string{"2.01", "2.5", "3"}, []string{"2", "2.0", "2.00", "3.1", "1.9"}},
		{`{"type":"number","minimum":-90,"maximum":90}`, []string{"-90", "-89.5", "-0.5", "0", "45.25", "90"}, []string{"-90.5", "-91", "90.1", "100"}},
		{`{"type":"number","maximum":-3}`, []string{"-3", "-3.5", "-100"}, []string{"-2.5", "0", "3"}},
		{`{"type":"number","exclusiveMaximum":0}`, []string{"-0.001", "-5"}, []string{"0", "0.5"}},
	}
	for _, tt := range tests {
		g, err := Compile([]byte(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.schema, err)
		}
		for _, doc := range tt.ok {
			m := g.NewMatcher()
			if _, ok := m.AdvanceBytes([]byte(doc)); !ok || !m.Done() {
				t.Errorf("%s: %s refused", tt.schema, doc)
			}
		}
		for _, doc := range tt.bad {
			m := g.NewMatcher()
			if _, ok := m.AdvanceBytes([]byte(doc)); ok && m.Done() {
				t.Errorf("%s: %s accepted", tt.schema, doc)
			}
		}
	}
}
