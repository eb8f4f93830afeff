package ns

import (
	"net"
	"net/netip"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
)

func seedRoute(f *testing.F, m *rtnetlink.RouteMessage) {
	b, err := m.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// FuzzRouteMessage feeds arbitrary RTM_NEWROUTE payloads through the
// template's route filter, and checks that every route it keeps survives
// the trip back into a request and out again.
func FuzzRouteMessage(f *testing.F) {
	seedRoute(f, &rtnetlink.RouteMessage{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{Gateway: net.IPv4(192, 0, 2, 254), OutIface: 2}})
	seedRoute(f, &rtnetlink.RouteMessage{Family: unix.AF_INET6, DstLength: 64, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{Dst: net.ParseIP("2001:db8::"), OutIface: 3, Priority: 256,
			Metrics: &rtnetlink.RouteMetrics{MTU: 1280}}})
	seedRoute(f, &rtnetlink.RouteMessage{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{Multipath: []rtnetlink.NextHop{
			{Hop: rtnetlink.RTNextHop{IfIndex: 2}, Gateway: net.IPv4(192, 0, 2, 254)},
			{Hop: rtnetlink.RTNextHop{IfIndex: 3}, Gateway: net.IPv4(203, 0, 113, 254)},
		}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m rtnetlink.RouteMessage
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		for _, r := range candidateRoutes([]rtnetlink.RouteMessage{m}, m.Family, func(int) bool { return false }) {
			if !r.Dst.IsValid() || r.Ifindex == 0 || isLinkLocalPrefix(r.Dst) {
				t.Fatalf("kept route %+v: want a valid, non-link-local destination and an interface", r)
			}
			req := routeMessage(r, 7)
			wire, err := req.MarshalBinary()
			if err != nil {
				t.Fatalf("marshal %+v: %v", r, err)
			}
			var back rtnetlink.RouteMessage
			if err := back.UnmarshalBinary(wire); err != nil {
				t.Fatalf("unmarshal our own request for %+v: %v", r, err)
			}
			got, ok := routeFromMessage(&back, routeHops(&back)[0])
			if !ok || got.Dst != r.Dst.Masked() || got.Gateway != r.Gateway || got.Metric != r.Metric ||
				got.MTU != r.MTU || got.Ifindex != 7 {
				t.Fatalf("round trip: got %+v (ok=%v), want %+v through ifindex 7", got, ok, r)
			}
		}
	})
}

// FuzzAddressMessage checks that interfaceAddrs never keeps a link-local
// or invalid address, whatever the kernel (or a fuzzer) sends.
func FuzzAddressMessage(f *testing.F) {
	for _, m := range []*rtnetlink.AddressMessage{
		{Family: unix.AF_INET, PrefixLength: 24, Index: 2, Attributes: &rtnetlink.AddressAttributes{
			Address: net.IPv4(192, 0, 2, 1), Local: net.IPv4(192, 0, 2, 1)}},
		{Family: unix.AF_INET6, PrefixLength: 64, Index: 2, Attributes: &rtnetlink.AddressAttributes{
			Address: net.ParseIP("2001:db8::1")}},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m rtnetlink.AddressMessage
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		for _, p := range interfaceAddrs([]rtnetlink.AddressMessage{m}, m.Family, int(m.Index)) {
			if !p.IsValid() || p.Addr().IsLinkLocalUnicast() || (m.Family == unix.AF_INET) != p.Addr().Is4() {
				t.Fatalf("kept %v from %+v", p, m)
			}
		}
	})
}

func TestIsLinkLocalPrefix(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"169.254.0.0/16", true},
		{"169.254.2.0/24", true},
		{"169.0.0.0/8", false},
		{"fe80::/64", true},
		{"fe80::/10", true},
		{"fe00::/8", false},
		{"0.0.0.0/0", false},
		{"2001:db8::/64", false},
	} {
		if got := isLinkLocalPrefix(netip.MustParsePrefix(tc.p)); got != tc.want {
			t.Errorf("isLinkLocalPrefix(%s): got %v, want %v", tc.p, got, tc.want)
		}
	}
}
