package fwdrule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// applyValue parses value and applies it to tb as pesto does.
func applyValue(tb *Table, opt byte, value string, del bool, warn func(string)) error {
	s, err := Parse(opt, value)
	if err != nil {
		return err
	}
	return Apply(tb, []Spec{s}, del, Pasta, captureEph, warn)
}

func mustApply(t *testing.T, tb *Table, opt byte, spec string, del bool) {
	t.Helper()
	if err := applyValue(tb, opt, spec, del, nil); err != nil {
		t.Fatalf("-%c %s: got error %v, want nil", opt, spec, err)
	}
}

// TestReferenceTables: pasta started with "-t 8080" (and its defaults
// -u auto, -T auto, -U auto) listed these rules; applying the same values
// to empty tables must give them, text and all (trailing spaces included).
func TestReferenceTables(t *testing.T) {
	host := Table{Pif: PifHost, Caps: allCaps}
	splice := Table{Pif: PifSplice, Caps: allCaps}
	mustApply(t, &host, 't', "8080", false)
	mustApply(t, &host, 'u', "auto", false)
	mustApply(t, &splice, 'T', "auto", false)
	mustApply(t, &splice, 'U', "auto", false)
	wantHost := []string{
		"TCP [*]:8080  =>  8080 ",
		"UDP [*]:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"UDP [*]:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	}
	wantSplice := []string{
		"TCP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"TCP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
		"UDP [*]%lo:1-32767  =>  1-32767  (best effort) (auto-scan)",
		"UDP [*]%lo:61000-65535  =>  61000-65535  (best effort) (auto-scan)",
	}
	if got := lines(&host); !slices.Equal(got, wantHost) {
		t.Errorf("HOST: got %q, want %q", got, wantHost)
	}
	if got := lines(&splice); !slices.Equal(got, wantSplice) {
		t.Errorf("SPLICE: got %q, want %q", got, wantSplice)
	}
}

func TestApplyPasta(t *testing.T) {
	tests := []struct {
		opt  byte
		spec string
		caps Caps
		want []string
	}{
		{'t', "127.0.0.1/8443:443,~8444", allCaps, []string{"TCP [127.0.0.1]:8443  =>  443 "}},
		{'u', "0.0.0.0/53:10.0.0.1/53", allCaps, []string{"UDP [0.0.0.0]:53  =>  10.0.0.1:53 "}},
		{'u', "100-200,auto", allCaps, []string{"UDP [*]:100-200  =>  100-200  (auto-scan)"}},
		{'t', "5-25,~10-20", allCaps, []string{"TCP [*]:5-9  =>  5-9 ", "TCP [*]:21-25  =>  21-25 "}},
		{'t', "22-80:32-90", allCaps, []string{"TCP [*]:22-80  =>  32-90 "}},
		{'t', "22,25", allCaps, []string{"TCP [*]:22  =>  22 ", "TCP [*]:25  =>  25 "}},
		{'t', "~25", allCaps, []string{"TCP [*]:1-24  =>  1-24  (best effort)", "TCP [*]:26-32767  =>  26-32767  (best effort)",
			"TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "all", allCaps, []string{"TCP [*]:1-32767  =>  1-32767  (best effort)", "TCP [*]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "127.0.0.1/all", allCaps, []string{"TCP [127.0.0.1]:1-32767  =>  1-32767  (best effort)",
			"TCP [127.0.0.1]:61000-65535  =>  61000-65535  (best effort)"}},
		{'t', "all,80", allCaps, []string{"TCP [*]:80  =>  80 "}}, // includes make "all" moot, as in pasta
		{'t', "[::1]/22", allCaps, []string{"TCP [::1]:22  =>  22 "}},
		{'t', "::1/22", allCaps, []string{"TCP [::1]:22  =>  22 "}},
		{'t', "fe80::1%eth0/22", allCaps, []string{"TCP [fe80::1]%eth0:22  =>  22 "}},
		{'t', "%eth0/22", allCaps, []string{"TCP [*]%eth0:22  =>  22 "}},
		{'t', "*%eth0/22", allCaps, []string{"TCP [*]%eth0:22  =>  22 "}},
		{'t', "*/22", allCaps, []string{"TCP [*]:22  =>  22 "}},
		{'u', "*/53:10.0.0.1", CapIPv4 | CapUDP, []string{"UDP [0.0.0.0]:53  =>  10.0.0.1:53 "}},
		{'t', "/22", allCaps, []string{"TCP [*]:22  =>  22 "}},
		{'t', "[127.0.0.1]/22:[10.0.0.2]/2222", allCaps, []string{"TCP [127.0.0.1]:22  =>  10.0.0.2:2222 "}},
		{'t', "::/80:2001:db8::5/8080", allCaps, []string{"TCP [::]:80  =>  2001:db8::5:8080 "}},
		{'t', "80", CapIPv4 | CapTCP, []string{"TCP [0.0.0.0]:80  =>  80 "}},
		{'t', "80", CapIPv6 | CapTCP, []string{"TCP [::]:80  =>  80 "}},
		{'T', "8080", allCaps, []string{"TCP [*]%lo:8080  =>  8080 "}},
		{'T', "8080", allCaps &^ CapIfname, []string{"TCP [127.0.0.1]:8080  =>  8080 ", "TCP [::1]:8080  =>  8080 "}},
		{'U', "53", allCaps &^ CapIfname &^ CapIPv6, []string{"UDP [127.0.0.1]:53  =>  53 "}},
		{'t', "none", allCaps, nil},
		{'t', " 80", allCaps, []string{"TCP [*]:80  =>  80 "}}, // strtoul skips blanks
		{'t', "65535:1", allCaps, []string{"TCP [*]:65535  =>  1 "}},
	}
	for _, tc := range tests {
		tb := Table{Pif: PifHost, Caps: tc.caps}
		var warned []string
		err := applyValue(&tb, tc.opt, tc.spec, false, func(s string) { warned = append(warned, s) })
		if err != nil {
			t.Errorf("-%c %q: got error %v, want nil", tc.opt, tc.spec, err)
			continue
		}
		if got := lines(&tb); !slices.Equal(got, tc.want) {
			t.Errorf("-%c %q: got %q, want %q", tc.opt, tc.spec, got, tc.want)
		}
		if tc.caps&CapIfname == 0 && (tc.opt == 'T' || tc.opt == 'U') && len(warned) != 1 {
			t.Errorf("-%c %q without CapIfname: got warnings %q, want one", tc.opt, tc.spec, warned)
		}
	}
}

func TestApplyPastaErrors(t *testing.T) {
	tests := []struct {
		opt     byte
		spec    string
		caps    Caps
		before  string // applied first, with -t
		wantMsg string
		kind    error // nil: a *SpecError
	}{
		{'t', "80x", allCaps, "", "Invalid port specifier '80x'", nil},
		{'t', "", allCaps, "", "Invalid port specifier ''", nil},
		{'t', "70000", allCaps, "", "Invalid port specifier '70000'", nil},
		{'t', "5-3", allCaps, "", "Invalid port specifier '5-3'", nil},
		{'t', "80:90-91", allCaps, "", "Invalid port specifier '80:90-91'", nil},
		{'t', "-1", allCaps, "", "Invalid port specifier '-1'", nil},
		{'t', "1.2.3.4/", allCaps, "", "Invalid port specifier ''", nil},
		{'t', "auto", allCaps &^ CapScan, "", "'auto' port forwarding is only allowed for pasta", nil},
		{'T', "127.0.0.1/80", allCaps, "", "Listening address not allowed for -T 127.0.0.1/80", nil},
		{'U', "*/53", allCaps, "", "Listening address not allowed for -U */53", nil},
		{'t', "*/80:10.0.0.1", allCaps, "", "Dual stack forward to IPv4 address 10.0.0.1 unsupported\nDid you mean 0.0.0.0/... instead?", ErrInvalid},
		{'t', "%./80", allCaps, "", "Invalid interface name: .", nil},
		{'t', "%eth0/80", allCaps &^ CapIfname, "", "Device binding for '-t %eth0/80' unsupported (requires kernel 5.7+)", nil},
		{'t', "%0123456789abcdef/80", allCaps, "", "Invalid port specifier '%0123456789abcdef/80'", nil},
		{'t', "none", allCaps, "22", "-t none conflicts with previous options", nil},
		{'t', "80", allCaps, "80", "Forwarding configuration conflict: TCP [*]:80  =>  80  versus TCP [*]:80  =>  80 ", ErrConflict},
		{'t', "0.0.0.0/80", allCaps, "80", "Forwarding configuration conflict: TCP [0.0.0.0]:80  =>  80  versus TCP [*]:80  =>  80 ", ErrConflict},
		{'t', "0", allCaps, "", "Forwarding rule attempts to map from port 0", ErrInvalid},
		{'t', "80:0", allCaps, "", "Forwarding rule attempts to map to port 0", ErrInvalid},
		{'t', "80:10.0.0.1", allCaps, "", "Dual stack forward to IPv4 address 10.0.0.1 unsupported\nDid you mean 0.0.0.0/... instead?", ErrInvalid},
		{'t', "0.0.0.0/80:224.0.0.1", allCaps, "", "Multicast target address 224.0.0.1 for forwarding rule", ErrInvalid},
		{'t', "0.0.0.0/80:[::1]", allCaps, "", "Forward from IPv4 (0.0.0.0) to IPv6 (::1) unsupported", ErrInvalid},
		{'t', "::1/80", CapIPv4 | CapTCP, "", "IPv6 forward, but IPv6 not enabled", ErrInvalid},
		{'u', "80", allCaps &^ CapUDP, "", "Can't add UDP forwarding rule, UDP not enabled", ErrInvalid},
	}
	for _, tc := range tests {
		tb := Table{Pif: PifHost, Caps: tc.caps}
		if tc.before != "" {
			mustApply(t, &tb, 't', tc.before, false)
		}
		err := applyValue(&tb, tc.opt, tc.spec, false, nil)
		if err == nil {
			t.Errorf("-%c %q: got nil error, want %q", tc.opt, tc.spec, tc.wantMsg)
			continue
		}
		msg := err.Error()
		var se *SpecError
		if errors.As(err, &se) {
			msg = se.PastaMessage()
		}
		var ae *ApplyError
		if errors.As(err, &ae) {
			msg = ae.Err.Error()
			if !strings.Contains(err.Error(), "Unable to add rule ") {
				t.Errorf("-%c %q: got %q, want it to say which rule could not be added", tc.opt, tc.spec, err)
			}
		}
		if !strings.HasPrefix(msg, tc.wantMsg) {
			t.Errorf("-%c %q: got %q, want %q", tc.opt, tc.spec, msg, tc.wantMsg)
		}
		if tc.kind == nil && se == nil {
			t.Errorf("-%c %q: got %T, want *SpecError", tc.opt, tc.spec, err)
		}
		if tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Errorf("-%c %q: got %v, want errors.Is %v", tc.opt, tc.spec, err, tc.kind)
		}
	}
}

func TestDelete(t *testing.T) {
	tb := Table{Pif: PifHost, Caps: allCaps}
	mustApply(t, &tb, 't', "8080,9090", false)
	mustApply(t, &tb, 't', "8080", true)
	if got, want := lines(&tb), []string{"TCP [*]:9090  =>  9090 "}; !slices.Equal(got, want) {
		t.Fatalf("after -D -t 8080: got %q, want %q", got, want)
	}
	for _, tc := range []struct{ spec, want string }{
		{"7070", "Couldn't find forwarding rule to delete: TCP [*]:7070  =>  7070 "},
		{"9090-9091", "Specifier TCP [*]:9090-9091  =>  9090-9091  conflicts with rule TCP [*]:9090  =>  9090 , but doesn't match it, can't delete"},
		{"9090:80", "Specifier TCP [*]:9090  =>  80  conflicts with rule"},
	} {
		err := applyValue(&tb, 't', tc.spec, true, nil)
		var ae *ApplyError
		if !errors.As(err, &ae) || ae.Op != "delete" || !errors.Is(err, ErrNotFound) {
			t.Errorf("-D -t %s: got %v, want an ApplyError for a delete", tc.spec, err)
			continue
		}
		if !strings.HasPrefix(ae.Err.Error(), tc.want) {
			t.Errorf("-D -t %s: got %q, want %q", tc.spec, ae.Err, tc.want)
		}
	}
}
