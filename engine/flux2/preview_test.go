package flux2

import (
	"context"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
)

// TestBatchShareAndPreview: images [1, 3) of a batch of 3 made alone
// equal images 1 and 2 of the whole batch (the noise is a slice of the
// batch's one draw, not another seed); OnLatents sees every step's
// latents, numbered in the batch; a preview of them is a half-size
// picture; a share outside its batch is refused.
func TestBatchShareAndPreview(t *testing.T) {
	dir := t.TempDir()
	if err := CreateDemo(dir, TinyDemo()); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ctx := context.Background()
	p, err := LoadPipeline(ctx, be, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Text.MaxLen = 32 // test time
	whole := Request{Prompt: "a cat", N: 3, Width: 32, Height: 32, Steps: 2, Seed: 42}
	all, err := p.Latents(ctx, whole, nil)
	if err != nil {
		t.Fatal(err)
	}
	share := whole
	share.First, share.N, share.Total = 1, 2, 3
	var seen []int
	var last Latents
	share.OnLatents = func(image, step, steps int, l Latents) {
		seen = append(seen, 10*image+step)
		last = Latents{C: l.C, H: l.H, W: l.W, Data: slices.Clone(l.Data)}
	}
	part, err := p.Latents(ctx, share, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range part {
		if !slices.Equal(l.Data, all[1+i].Data) {
			t.Errorf("image %d of the share differs from image %d of the batch", i, 1+i)
		}
	}
	if want := []int{11, 12, 21, 22}; !slices.Equal(seen, want) {
		t.Errorf("OnLatents saw %v, want %v", seen, want)
	}
	if !slices.Equal(last.Data, all[2].Data) {
		t.Error("the last step's latents are not the final latents")
	}
	img, err := p.Preview(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 16 || b.Dy() != 16 {
		t.Errorf("preview %v, want 16×16", b)
	}
	if !slices.Equal(last.Data, all[2].Data) {
		t.Error("Preview changed its latents")
	}
	for _, bad := range []struct{ first, n, total int }{{2, 2, 3}, {-1, 1, 3}, {0, 2, 1}} {
		r := whole
		r.First, r.N, r.Total = bad.first, bad.n, bad.total
		if _, err := p.Latents(ctx, r, nil); err == nil {
			t.Errorf("images [%d, %d) of %d: no error", bad.first, bad.first+bad.n, bad.total)
		}
	}
}

func TestPoolLatents(t *testing.T) {
	l := Latents{C: 1, H: 2, W: 4, Data: []float32{1, 3, 5, 7, 1, 3, 9, 11}}
	got := PoolLatents(l)
	if got.C != 1 || got.H != 1 || got.W != 2 || !slices.Equal(got.Data, []float32{2, 8}) {
		t.Errorf("got %+v", got)
	}
}
