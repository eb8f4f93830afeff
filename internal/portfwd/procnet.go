package portfwd

// The /proc/net tables of each side, auto scanning's fallback where
// inet_diag is missing.

import (
	"errors"
	"io"
	"os"

	"github.com/gopasta/gopasta/internal/fwdrule"
)

// procNet is one side's /proc net tables (tcp, tcp6, udp, udp6), the
// fallback of auto scanning where inet_diag is missing. They are opened at
// Start and re-read from their start at every scan: once gopasta's sandbox
// is on (internal/sandbox) no file can be opened, and an open table keeps
// showing the namespace it was opened in.
type procNet struct {
	files [4]*os.File // tcp, tcp6, udp, udp6; nil where it could not be opened
	buf   []byte
}

var procNetNames = [4]string{"tcp", "tcp6", "udp", "udp6"}

// openProcNet opens the tables under dir, as far as they exist.
func openProcNet(dir string) *procNet {
	p := &procNet{buf: make([]byte, 64<<10)}
	for i, n := range procNetNames {
		if f, err := os.Open(dir + "/" + n); err == nil {
			p.files[i] = f
		}
	}
	return p
}

// read returns the listening TCP and bound UDP ports.
func (p *procNet) read() (tcp, udp fwdrule.PortSet) {
	if p == nil {
		return tcp, udp
	}
	for i, f := range p.files {
		if f == nil {
			continue
		}
		b, ok := p.readAll(f)
		if !ok {
			continue
		}
		if i < 2 {
			parseProcNet(b, procStateListen, &tcp)
		} else {
			parseProcNet(b, procStateUnconn, &udp)
		}
	}
	return tcp, udp
}

// readAll reads f from its start, growing the buffer as needed (a table
// has a line per socket).
func (p *procNet) readAll(f *os.File) ([]byte, bool) {
	for {
		n, err := f.ReadAt(p.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false
		}
		if n < len(p.buf) || len(p.buf) >= 64<<20 {
			return p.buf[:n], true
		}
		p.buf = make([]byte, 2*len(p.buf))
	}
}

func (p *procNet) close() {
	if p == nil {
		return
	}
	for _, f := range p.files {
		if f != nil {
			f.Close()
		}
	}
}
