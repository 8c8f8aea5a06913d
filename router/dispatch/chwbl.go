package dispatch

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultVirtualNodes is how many points each node has on the ring.
const DefaultVirtualNodes = 256

// Ring is a consistent-hash ring with bounded loads (CHWBL: Mirrokni,
// Thorup, Zadimoghaddam 2016; as KubeAI routes): a key goes clockwise to
// the first node whose load stays within c times the average. Every
// frontend that sees the same nodes builds the same ring, so they agree
// on where a key goes without talking. A Ring is immutable.
type Ring struct {
	nodes  []string
	points []point // sorted by hash
}

type point struct {
	hash uint64
	node int // index into nodes
}

// NewRing places each node at vnodes points (xxhash of "id#i"); the order
// of nodes does not matter.
func NewRing(nodes []string, vnodes int) *Ring {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	r := &Ring{nodes: slices.Clone(nodes)}
	slices.Sort(r.nodes)
	r.nodes = slices.Compact(r.nodes)
	r.points = make([]point, 0, len(r.nodes)*vnodes)
	for i, id := range r.nodes {
		for v := range vnodes {
			r.points = append(r.points, point{xxhash.Sum64String(id + "#" + strconv.Itoa(v)), i})
		}
	}
	sort.Slice(r.points, func(a, b int) bool {
		pa, pb := r.points[a], r.points[b]
		return pa.hash < pb.hash || pa.hash == pb.hash && pa.node < pb.node
	})
	return r
}

// Nodes returns the ring's nodes, sorted.
func (r *Ring) Nodes() []string { return slices.Clone(r.nodes) }

// Bound is the most load a node may carry after taking one more request
// when the nodes carry total between them: ⌈c × (total+1) / n⌉.
func Bound(total int64, n int, c float64) int64 {
	if n == 0 {
		return 0
	}
	return int64(math.Ceil(c * float64(total+1) / float64(n)))
}

// Order returns the ring's nodes in the order key should try them: first
// the nodes met clockwise from the key whose load+1 stays within the
// bound (the first of them is the CHWBL choice), then the others, least
// loaded first. load gives a node's current load (missing: 0); c is the
// load factor (> 1; 1.25 is usual).
func (r *Ring) Order(key uint64, load func(node string) int64, c float64) []string {
	n := len(r.nodes)
	if n == 0 {
		return nil
	}
	loads := make([]int64, n)
	var total int64
	for i, id := range r.nodes {
		loads[i] = max(0, load(id))
		total += loads[i]
	}
	bound := Bound(total, n, c)
	start := sort.Search(len(r.points), func(i int) bool { return r.points[i].hash >= key })
	seen := make([]bool, n)
	fit := make([]string, 0, n)
	var over []int
	for k := 0; k < len(r.points) && len(fit)+len(over) < n; k++ {
		p := r.points[(start+k)%len(r.points)]
		if seen[p.node] {
			continue
		}
		seen[p.node] = true
		if loads[p.node]+1 <= bound {
			fit = append(fit, r.nodes[p.node])
		} else {
			over = append(over, p.node)
		}
	}
	sort.SliceStable(over, func(a, b int) bool { return loads[over[a]] < loads[over[b]] })
	for _, i := range over {
		fit = append(fit, r.nodes[i])
	}
	return fit
}

// Pick is the CHWBL choice for key: the first of Order.
func (r *Ring) Pick(key uint64, load func(node string) int64, c float64) string {
	if o := r.Order(key, load, c); len(o) > 0 {
		return o[0]
	}
	return ""
}

// HashString is the key of a string (a session id).
func HashString(s string) uint64 { return xxhash.Sum64String(s) }

// PrefixChain hashes the first max bytes of text in chunks of chunk
// bytes, each hash covering its chunk and the one before:
// h_i = H(h_{i-1} || chunk_i). Equal hashes at position i mean equal
// text up to the end of chunk i, so the last hash is a key for "this
// prefix" and the chain can index a prefix cache. seed starts the chain
// (the model name, so the same text for two models gives two keys).
func PrefixChain(seed string, text []byte, maxBytes, chunk int) []uint64 {
	if maxBytes > 0 && len(text) > maxBytes {
		text = text[:maxBytes]
	}
	if chunk <= 0 {
		chunk = len(text) + 1
	}
	h := xxhash.Sum64String(seed)
	chain := make([]uint64, 0, len(text)/chunk+1)
	var buf [8]byte
	d := xxhash.New()
	for off := 0; off < len(text); off += chunk {
		d.Reset()
		binary.LittleEndian.PutUint64(buf[:], h)
		d.Write(buf[:])
		d.Write(text[off:min(off+chunk, len(text))])
		h = d.Sum64()
		chain = append(chain, h)
	}
	if len(chain) == 0 {
		chain = append(chain, h)
	}
	return chain
}
