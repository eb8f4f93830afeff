package fwd

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestFlowTableChurn inserts and removes random keys against a map model,
// so backward-shift deletion is checked on long probe runs (the index is
// small, collisions are frequent).
func TestFlowTableChurn(t *testing.T) {
	const capacity = 64
	ft := newFlowTable(capacity)
	model := map[flowKey]int32{}
	r := rand.New(rand.NewPCG(1, 2))
	key := func() flowKey {
		p := packet{proto: 17, src: netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))}),
			dst: netip.AddrFrom4([4]byte{192, 0, 2, 1}), sport: uint16(r.IntN(40)), dport: 53}
		var k flowKey
		keyFor(&p, &k)
		return k
	}
	for i := range 20000 {
		k := key()
		got := ft.lookup(&k)
		want, ok := model[k]
		if !ok {
			want = -1
		}
		if got != want {
			t.Fatalf("step %d: lookup = %d, want %d", i, got, want)
		}
		if ok {
			ft.unhash(got)
			ft.release(got)
			delete(model, k)
		} else if idx := ft.alloc(&k, protoUDP); idx >= 0 {
			model[k] = idx
		} else if len(model) != capacity {
			t.Fatalf("step %d: alloc failed with %d of %d used", i, len(model), capacity)
		}
		if len(ft.active) != len(model) || ft.available() != capacity-len(model) {
			t.Fatalf("step %d: active %d available %d, model %d", i, len(ft.active), ft.available(), len(model))
		}
	}
	for k, idx := range model {
		if got := ft.lookup(&k); got != idx {
			t.Fatalf("final lookup = %d, want %d", got, idx)
		}
	}
}
