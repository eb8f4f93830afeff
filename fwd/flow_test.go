package fwd

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/gopasta/gopasta/internal/header"
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

// TestFlowTableHoldsNoPointers: the per-flow arrays (the flow table and
// the TCP translator's state) hold no pointer, so the garbage collector
// never scans them and their unused capacity never becomes resident.
func TestFlowTableHoldsNoPointers(t *testing.T) {
	var holds func(reflect.Type) bool
	holds = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface,
			reflect.Chan, reflect.Func, reflect.UnsafePointer:
			return true
		case reflect.Array:
			return holds(ty.Elem())
		case reflect.Struct:
			for i := range ty.NumField() {
				if holds(ty.Field(i).Type) {
					return true
				}
			}
		}
		return false
	}
	for _, v := range []any{Flow{}, tcpConn{}} {
		if ty := reflect.TypeOf(v); holds(ty) {
			t.Errorf("%v: got a type that holds a pointer, want none", ty)
		}
	}
}

// TestFlowAddrs: a flow gives back the addresses it was made with.
func TestFlowAddrs(t *testing.T) {
	for _, tc := range []struct{ ns, dst, host string }{
		{"10.0.2.100", "192.0.2.1", "127.0.0.1"},
		{"2001:db8::2", "2001:db8::1", "::1"},
	} {
		ns, dst, host := netip.MustParseAddr(tc.ns), netip.MustParseAddr(tc.dst), netip.MustParseAddr(tc.host)
		ft := newFlowTable(4)
		k := flowKey{proto: header.ProtocolUDP, ns: ns.As16(), dst: dst.As16()}
		f := &ft.flows[ft.alloc(&k, protoUDP)]
		f.v6 = ns.Is6()
		if f.HostAddr().IsValid() {
			t.Errorf("%v: got host address %v before setHostAddr, want none", tc, f.HostAddr())
		}
		f.setHostAddr(host)
		if f.NSAddr() != ns || f.DstAddr() != dst || f.HostAddr() != host {
			t.Errorf("got %v %v %v, want %v %v %v", f.NSAddr(), f.DstAddr(), f.HostAddr(), ns, dst, host)
		}
	}
}
