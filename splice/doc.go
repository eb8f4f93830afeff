// Package splice forwards loopback-to-loopback traffic between a socket in
// one network namespace and a socket in another without touching the TAP
// device: TCP bytes move with splice(2) through a pipe per direction (they
// never enter user space), UDP datagrams move with recvmmsg/sendmmsg batches.
//
// The caller (the engine) accepts a connection on a listener in one
// namespace, creates the matching socket in the other namespace on that
// namespace's thread (see Dialer, DialTCP, DialUDP) and hands both fds to a
// Forwarder, which owns them from then on. A Forwarder runs one epoll loop on
// a locked OS thread (Run); Add* may be called from any goroutine.
package splice
