// Package e2e holds gopasta's end-to-end tests. They build the gopasta
// binary (internal/nstest.Binary) and drive it inside a throwaway "host"
// network namespace (internal/nstest.HostNS) as root and as uid 65534,
// checking what the namespace it serves sees and what reaches peers on
// either side. They need root to create the host namespace and skip
// otherwise; uid 65534 also needs a usable /dev/net/tun (chmod 0666) and
// unprivileged user namespaces. The --vhost tests run inside a QEMU guest
// (internal/vmtest), where this test binary is gopasta too.
//
// GOPASTA_BIN=/usr/bin/pasta go test -skip '^TestVhost' ./e2e runs the same
// checks against the reference implementation.
//
// The files: main_test.go (the roles of the test binary),
// peer_test.go (the test peer: stream, transfer protocol, UDP echo, the
// commands the namespace side runs), env_test.go (the fixture: host
// namespace, user, gopasta, host-side dialing), then one file per topic.
package e2e
