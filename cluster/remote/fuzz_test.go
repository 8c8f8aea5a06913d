package remote_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"fusion/cluster/enginepb"
	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/sample"
)

// FuzzRequestFromPB: any bytes a peer sends decode to a request or an
// error, never a panic, and a decoded request encodes again.
func FuzzRequestFromPB(f *testing.F) {
	seed, _ := remote.RequestToPB(&engine.Request{Model: "demo", Sampling: sample.DefaultParams(), MaxTokens: 3,
		Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "hi", "x", 1.5)}})
	b, _ := proto.Marshal(seed)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p enginepb.Request
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		req, err := remote.RequestFromPB(&p)
		if err != nil {
			return
		}
		if _, err := remote.RequestToPB(req); err != nil {
			t.Fatalf("a decoded request does not encode: %v", err)
		}
	})
}
