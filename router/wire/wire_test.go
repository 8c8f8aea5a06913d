package wire

import "testing"

func TestMarshal(t *testing.T) {
	b, err := Marshal(map[string]string{"html": "<b>&</b>"})
	if err != nil || string(b) != `{"html":"<b>&</b>"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Fatal("Marshal of a func succeeded")
	}
}
