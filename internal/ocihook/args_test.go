package ocihook

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" \t\n ", nil},
		{"-t 8080:80", []string{"-t", "8080:80"}},
		{"  -t   8080:80\t-u\n53  ", []string{"-t", "8080:80", "-u", "53"}},
		{"--search 'a.example b.example'", []string{"--search", "a.example b.example"}},
		{`--search "a.example b.example"`, []string{"--search", "a.example b.example"}},
		{`-H a\ b`, []string{"-H", "a b"}},
		{`''`, []string{""}},
		{`"" x`, []string{"", "x"}},
		{`a'b'"c"d`, []string{"abcd"}},
		{`'it'\''s'`, []string{"it's"}},
		{`"say \"hi\" \\ \n"`, []string{`say "hi" \ \n`}},
		{`'\' "\'"`, []string{`\`, `\'`}},
		{`\'`, []string{"'"}},
		{"-t\t'127.0.0.1/8080:80'", []string{"-t", "127.0.0.1/8080:80"}},
	} {
		got, err := SplitArgs(tc.in)
		if err != nil {
			t.Errorf("SplitArgs(%q): got error %v, want %q", tc.in, err, tc.want)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("SplitArgs(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSplitArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		in     string
		offset int
		want   string
	}{
		{"-t '8080", 3, "unterminated single quote"},
		{`-t "8080`, 3, "unterminated double quote"},
		{`-t "8080\"`, 3, "unterminated double quote"},
		{`-t 8080\`, 7, "backslash at the end"},
		{"-t 80\x0080", 5, "NUL byte"},
		{"'a\x00'", 2, "NUL byte"},
		{"\"a\x00\"", 2, "NUL byte"},
		{"\\\x00", 1, "NUL byte"},
		{strings.Repeat("x", MaxArgsSize+1), MaxArgsSize, "4097 bytes long, want at most 4096"},
	} {
		got, err := SplitArgs(tc.in)
		var ae *ArgsError
		if !errors.As(err, &ae) {
			t.Errorf("SplitArgs(%q): got %q, %v, want an *ArgsError", tc.in, got, err)
			continue
		}
		if ae.Offset != tc.offset || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SplitArgs(%q): got %q at %d, want %q at %d", tc.in, err, ae.Offset, tc.want, tc.offset)
		}
	}
}

// FuzzSplitArgs: no input panics; errors are *ArgsError within the input;
// words never hold NUL; quoting the words and splitting again gives them
// back.
func FuzzSplitArgs(f *testing.F) {
	for _, s := range []string{"-t 8080:80", `--search 'a b' -H "x\"y"`, `a\ b`, `'`, `"\`, "\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitArgs(s)
		if err != nil {
			var ae *ArgsError
			if !errors.As(err, &ae) || ae.Offset < 0 || ae.Offset > len(s) {
				t.Fatalf("SplitArgs(%q): got %v, want an *ArgsError at an offset within the input", s, err)
			}
			return
		}
		for _, w := range words {
			if strings.IndexByte(w, 0) >= 0 {
				t.Fatalf("SplitArgs(%q): got word %q with a NUL", s, w)
			}
		}
		q := QuoteArgs(words)
		if len(q) > MaxArgsSize {
			return // quoting grew it past the limit
		}
		again, err := SplitArgs(q)
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("SplitArgs(QuoteArgs(%q)) = %q, %v; want the words back", words, again, err)
		}
	})
}
