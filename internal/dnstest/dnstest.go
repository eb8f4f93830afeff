// Package dnstest is a tiny DNS server for tests: it answers A and AAAA
// queries for one fixed name over UDP and TCP, and counts what it served.
// It speaks just enough of RFC 1035 for resolvers and nslookup (one
// question, no EDNS, answers with a compression pointer to the question),
// with the standard library only, and the message codec is shared with the
// tests' clients.
package dnstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
)

// Query types and response codes the server knows.
const (
	TypeA    uint16 = 1
	TypeAAAA uint16 = 28

	RCodeOK       = 0
	RCodeFormErr  = 1
	RCodeNXDomain = 3
	RCodeNotImp   = 4
)

// Server answers for Name: TypeA with A, TypeAAAA with AAAA (no answer when
// invalid). Other names get NXDOMAIN.
type Server struct {
	Name string
	A    netip.Addr
	AAAA netip.Addr

	udp, tcp atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex
	closers  []io.Closer
}

// QueriesUDP and QueriesTCP count the queries answered so far.
func (s *Server) QueriesUDP() uint64 { return s.udp.Load() }

// QueriesTCP counts queries answered over TCP.
func (s *Server) QueriesTCP() uint64 { return s.tcp.Load() }

// ServeUDP answers on pc in the background until Close.
func (s *Server) ServeUDP(pc net.PacketConn) {
	s.track(pc)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := s.Answer(buf[:n]); resp != nil {
				s.udp.Add(1)
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
}

// ServeTCP answers on l in the background until Close: each connection
// carries length-prefixed messages (RFC 1035 4.2.2) until the client
// closes it.
func (s *Server) ServeTCP(l net.Listener) {
	s.track(l)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.track(c)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serveConn(c)
			}()
		}
	}()
}

func (s *Server) serveConn(c net.Conn) {
	var hdr [2]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp := s.Answer(msg)
		if resp == nil {
			return
		}
		s.tcp.Add(1)
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

func (s *Server) track(c io.Closer) {
	s.mu.Lock()
	s.closers = append(s.closers, c)
	s.mu.Unlock()
}

// Close stops serving and waits for the server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	cs := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// Answer returns the response to the query msg, or nil when msg is not a
// query worth answering (a response, or too short to carry an ID).
func (s *Server) Answer(msg []byte) []byte {
	q, err := ParseQuery(msg)
	if err != nil {
		if len(msg) < 12 || msg[2]&0x80 != 0 {
			return nil
		}
		// Echo the ID and flag the error, as servers do.
		return header(binary.BigEndian.Uint16(msg), RCodeFormErr, 0, 0)
	}
	if q.Opcode != 0 {
		return appendQuestion(header(q.ID, RCodeNotImp, 1, 0), q)
	}
	if !strings.EqualFold(strings.TrimSuffix(q.Name, "."), strings.TrimSuffix(s.Name, ".")) {
		return appendQuestion(header(q.ID, RCodeNXDomain, 1, 0), q)
	}
	var rdata []byte
	switch {
	case q.Type == TypeA && s.A.Is4():
		b := s.A.As4()
		rdata = b[:]
	case q.Type == TypeAAAA && s.AAAA.Is6():
		b := s.AAAA.As16()
		rdata = b[:]
	}
	if rdata == nil {
		return appendQuestion(header(q.ID, RCodeOK, 1, 0), q)
	}
	out := appendQuestion(header(q.ID, RCodeOK, 1, 1), q)
	out = append(out, 0xc0, 12) // pointer to the question's name
	out = binary.BigEndian.AppendUint16(out, q.Type)
	out = binary.BigEndian.AppendUint16(out, 1) // IN
	out = binary.BigEndian.AppendUint32(out, 60)
	out = binary.BigEndian.AppendUint16(out, uint16(len(rdata)))
	return append(out, rdata...)
}

// header is a response header: QR, AA and RA set, RD echoed as set (every
// client here asks for recursion).
func header(id uint16, rcode int, qd, an uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x85, 0x80|byte(rcode))
	b = binary.BigEndian.AppendUint16(b, qd)
	b = binary.BigEndian.AppendUint16(b, an)
	return append(b, 0, 0, 0, 0)
}

func appendQuestion(b []byte, q Query) []byte {
	b = appendName(b, q.Name)
	b = binary.BigEndian.AppendUint16(b, q.Type)
	return binary.BigEndian.AppendUint16(b, q.Class)
}

// Query is the question of a DNS message.
type Query struct {
	ID     uint16
	Opcode int
	Name   string // dotted, without the trailing dot
	Type   uint16
	Class  uint16
}

// ErrMalformed wraps every parse failure.
var ErrMalformed = errors.New("malformed DNS message")

// ParseQuery parses a query with exactly one question.
func ParseQuery(msg []byte) (Query, error) {
	if len(msg) < 12 {
		return Query{}, fmt.Errorf("%w: %d bytes, shorter than a header", ErrMalformed, len(msg))
	}
	if msg[2]&0x80 != 0 {
		return Query{}, fmt.Errorf("%w: a response, not a query", ErrMalformed)
	}
	if qd := binary.BigEndian.Uint16(msg[4:]); qd != 1 {
		return Query{}, fmt.Errorf("%w: %d questions, want 1", ErrMalformed, qd)
	}
	name, off, err := parseName(msg, 12)
	if err != nil {
		return Query{}, err
	}
	if off+4 > len(msg) {
		return Query{}, fmt.Errorf("%w: question truncated", ErrMalformed)
	}
	return Query{
		ID:     binary.BigEndian.Uint16(msg),
		Opcode: int(msg[2]>>3) & 0xf,
		Name:   name,
		Type:   binary.BigEndian.Uint16(msg[off:]),
		Class:  binary.BigEndian.Uint16(msg[off+2:]),
	}, nil
}

// parseName reads an uncompressed name (queries carry no pointers) at off
// and returns it and the offset after it.
func parseName(msg []byte, off int) (string, int, error) {
	var labels []string
	total := 0
	for {
		if off >= len(msg) {
			return "", 0, fmt.Errorf("%w: name runs past the message", ErrMalformed)
		}
		l := int(msg[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 {
			return "", 0, fmt.Errorf("%w: label length byte %#x (compression in a question?)", ErrMalformed, l)
		}
		if off+l > len(msg) {
			return "", 0, fmt.Errorf("%w: label runs past the message", ErrMalformed)
		}
		total += l + 1
		if total > 255 {
			return "", 0, fmt.Errorf("%w: name longer than 255 bytes", ErrMalformed)
		}
		labels = append(labels, string(msg[off:off+l]))
		off += l
	}
	return strings.Join(labels, "."), off, nil
}

func appendName(b []byte, name string) []byte {
	name = strings.TrimSuffix(name, ".")
	if name != "" {
		for _, l := range strings.Split(name, ".") {
			b = append(b, byte(len(l)))
			b = append(b, l...)
		}
	}
	return append(b, 0)
}

// NewQuery builds a recursive query for name and qtype.
func NewQuery(id uint16, name string, qtype uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0)
	return appendQuestion(b, Query{Name: name, Type: qtype, Class: 1})
}

// Response is what a client needs from an answer.
type Response struct {
	ID    uint16
	RCode int
	Addrs []netip.Addr // A and AAAA records of the answer section
}

// ParseResponse parses the answers Server writes (and ordinary ones: names
// in answers may be pointers or labels).
func ParseResponse(msg []byte) (Response, error) {
	if len(msg) < 12 {
		return Response{}, fmt.Errorf("%w: %d bytes, shorter than a header", ErrMalformed, len(msg))
	}
	if msg[2]&0x80 == 0 {
		return Response{}, fmt.Errorf("%w: a query, not a response", ErrMalformed)
	}
	r := Response{ID: binary.BigEndian.Uint16(msg), RCode: int(msg[3] & 0xf)}
	qd, an := int(binary.BigEndian.Uint16(msg[4:])), int(binary.BigEndian.Uint16(msg[6:]))
	off := 12
	var err error
	for i := 0; i < qd; i++ {
		if off, err = skipName(msg, off); err != nil {
			return r, err
		}
		off += 4
	}
	for i := 0; i < an; i++ {
		if off, err = skipName(msg, off); err != nil {
			return r, err
		}
		if off+10 > len(msg) {
			return r, fmt.Errorf("%w: answer %d truncated", ErrMalformed, i)
		}
		typ := binary.BigEndian.Uint16(msg[off:])
		rdlen := int(binary.BigEndian.Uint16(msg[off+8:]))
		off += 10
		if off+rdlen > len(msg) {
			return r, fmt.Errorf("%w: answer %d data truncated", ErrMalformed, i)
		}
		rd := msg[off : off+rdlen]
		off += rdlen
		switch {
		case typ == TypeA && rdlen == 4:
			r.Addrs = append(r.Addrs, netip.AddrFrom4([4]byte(rd)))
		case typ == TypeAAAA && rdlen == 16:
			r.Addrs = append(r.Addrs, netip.AddrFrom16([16]byte(rd)))
		}
	}
	return r, nil
}

// skipName steps over a name that may end in a compression pointer.
func skipName(msg []byte, off int) (int, error) {
	for {
		if off >= len(msg) {
			return 0, fmt.Errorf("%w: name runs past the message", ErrMalformed)
		}
		l := int(msg[off])
		switch {
		case l == 0:
			return off + 1, nil
		case l&0xc0 == 0xc0:
			if off+2 > len(msg) {
				return 0, fmt.Errorf("%w: pointer truncated", ErrMalformed)
			}
			return off + 2, nil
		case l > 63:
			return 0, fmt.Errorf("%w: label length byte %#x", ErrMalformed, l)
		}
		off += 1 + l
	}
}
