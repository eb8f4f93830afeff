package main

// The workloads. Splice rows do not depend on the TAP's MTU (their bytes
// never cross it), so they run once, with the MTU 65520 instance; so do the
// UDP and request/response rows, whose point is per-packet and per-connection
// cost rather than segment size.
const mtuBig, mtuSmall = 65520, 1500

func fullCases() []testCase {
	var cs []testCase
	for _, mtu := range []int{mtuBig, mtuSmall} {
		for _, fam := range []int{4, 6} {
			cs = append(cs,
				testCase{kind: "tcp", dir: "out", path: "tap", fam: fam, mtu: mtu},
				testCase{kind: "tcp", dir: "in", path: "tap", fam: fam, mtu: mtu},
				testCase{kind: "tcp", dir: "out", path: "gw", fam: fam, mtu: mtu},
			)
		}
	}
	for _, fam := range []int{4, 6} {
		cs = append(cs,
			testCase{kind: "tcp", dir: "out", path: "splice", fam: fam, mtu: mtuBig},
			testCase{kind: "tcp", dir: "in", path: "splice", fam: fam, mtu: mtuBig},
		)
	}
	for _, path := range []string{"tap", "splice"} {
		for _, fam := range []int{4, 6} {
			for _, size := range []int{1400, 65000} {
				cs = append(cs,
					testCase{kind: "udp", dir: "out", path: path, fam: fam, mtu: mtuBig, size: size},
					testCase{kind: "udp", dir: "in", path: path, fam: fam, mtu: mtuBig, size: size},
				)
			}
		}
	}
	// The request/response rows twice: with every party free to run on
	// any CPU, then with the tool, the client and the server on one CPU,
	// where a transaction's figure is its whole cost to a CPU that it
	// shares (what a host running many containers pays per connection).
	for _, pinned := range []bool{false, true} {
		for _, kind := range []string{"rr", "crr"} {
			for _, dp := range [][2]string{{"out", "tap"}, {"in", "tap"}, {"out", "splice"}, {"in", "splice"}} {
				cs = append(cs, testCase{kind: kind, dir: dp[0], path: dp[1], fam: 4, mtu: mtuBig, pinned: pinned})
			}
		}
	}
	return cs
}

// quickCases is the two-minute subset: IPv4, every TCP path, and one of
// each of the other kinds (host -> namespace connection churn is the case
// that crashed pasta's 2023 build), pinned request/response included.
func quickCases() []testCase {
	var cs []testCase
	for _, mtu := range []int{mtuBig, mtuSmall} {
		cs = append(cs,
			testCase{kind: "tcp", dir: "out", path: "tap", fam: 4, mtu: mtu},
			testCase{kind: "tcp", dir: "in", path: "tap", fam: 4, mtu: mtu},
		)
	}
	cs = append(cs,
		testCase{kind: "tcp", dir: "out", path: "gw", fam: 4, mtu: mtuBig},
		testCase{kind: "tcp", dir: "out", path: "splice", fam: 4, mtu: mtuBig},
		testCase{kind: "tcp", dir: "in", path: "splice", fam: 4, mtu: mtuBig},
		testCase{kind: "udp", dir: "out", path: "tap", fam: 4, mtu: mtuBig, size: 1400},
		testCase{kind: "udp", dir: "out", path: "tap", fam: 4, mtu: mtuBig, size: 65000},
		testCase{kind: "udp", dir: "out", path: "splice", fam: 4, mtu: mtuBig, size: 65000},
		testCase{kind: "rr", dir: "out", path: "tap", fam: 4, mtu: mtuBig},
		testCase{kind: "crr", dir: "in", path: "tap", fam: 4, mtu: mtuBig},
		testCase{kind: "rr", dir: "out", path: "tap", fam: 4, mtu: mtuBig, pinned: true},
		testCase{kind: "crr", dir: "in", path: "splice", fam: 4, mtu: mtuBig, pinned: true},
	)
	return cs
}
