// Package splice owns every spliced connection and datagram: traffic
// between loopback in one network namespace and loopback in the other that
// never touches the TAP device. TCP bytes move with splice(2) through a
// pipe per direction (they never enter user space); UDP datagrams move
// with recvmmsg/sendmmsg batches.
//
// A Forwarder runs one epoll loop on one goroutine (Run). It serves
// its own listeners (AddTCPListener, AddUDPListener: the namespace's -T and
// -U ports, and the host's with --splice-only), accepting, dialling the
// other side and pumping on that one goroutine. Pairs of sockets made
// elsewhere (the engine's loopback peers of -t and -u) are handed over
// with AddTCP and AddUDP from any goroutine.
//
// Why not io.Copy between *net.TCPConn (which splices too)? With the
// peers in other processes, as in real use, this loop moves a stream
// faster and answers small round trips with less CPU (BenchmarkExternal,
// BenchmarkExternalPingPong; docs/architecture.md, "Splice path"). io.Copy
// only wins when the peers are goroutines of the same process, where the
// Go scheduler can run proxy and peers on one thread without wake-ups.
package splice
