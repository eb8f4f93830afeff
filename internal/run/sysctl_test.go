package run

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopasta/gopasta/fwd"
)

// TestHostTimeouts reads the timeouts from a sysctl tree: every setting
// present, none (a kernel without conntrack and without the newer TCP
// settings), and values that are no numbers.
func TestHostTimeouts(t *testing.T) {
	defaults := fwd.DefaultTimeouts()
	noLinear := defaults
	noLinear.SynLinear = 0
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  fwd.Timeouts
	}{
		{"all set", map[string]string{
			"net/ipv4/tcp_syn_retries":                      "2\n",
			"net/ipv4/tcp_syn_linear_timeouts":              "1\n",
			"net/ipv4/tcp_synack_retries":                   "3\n",
			"net/ipv4/tcp_rto_max_ms":                       "1500\n",
			"net/netfilter/nf_conntrack_udp_timeout":        "10\n",
			"net/netfilter/nf_conntrack_udp_timeout_stream": "60\n",
		}, fwd.Timeouts{SynRetries: 2, SynLinear: 1, SynAckRetries: 3, RTOMax: 1500 * time.Millisecond,
			UDP: 10 * time.Second, UDPStream: 60 * time.Second}},
		{"none", nil, noLinear},
		{"kernel defaults, no conntrack", map[string]string{
			"net/ipv4/tcp_syn_retries":         "6\n",
			"net/ipv4/tcp_syn_linear_timeouts": "4\n",
			"net/ipv4/tcp_synack_retries":      "5\n",
			"net/ipv4/tcp_rto_max_ms":          "120000\n",
		}, defaults},
		{"not numbers", map[string]string{
			"net/ipv4/tcp_syn_retries":               "six\n",
			"net/ipv4/tcp_rto_max_ms":                "",
			"net/netfilter/nf_conntrack_udp_timeout": "0\n",
		}, noLinear},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := hostTimeouts(root); got != tc.want {
				t.Errorf("hostTimeouts: got %+v, want %+v", got, tc.want)
			}
		})
	}
}
