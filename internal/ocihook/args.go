package ocihook

// The options annotation's value split into arguments (SplitArgs), and
// quoted back (QuoteArgs).

import (
	"fmt"
	"strings"
)

// MaxArgsSize bounds an annotation's option string.
const MaxArgsSize = 4096

// An ArgsError says why an annotation's option string could not be split
// into words.
type ArgsError struct {
	Offset int // byte offset of the fault in the value
	Reason string
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("%s (at byte %d)", e.Reason, e.Offset)
}

// SplitArgs splits an annotation's value into command line words the way a
// POSIX shell splits a simple command, without expanding anything: blanks
// (space, tab, newline) separate words; inside single quotes every byte is
// literal; inside double quotes a backslash escapes only '"' and '\';
// elsewhere a backslash makes the next byte literal. So
//
//	-t 8080:80 --search 'a.example b.example'
//
// is four words. An unterminated quote, a trailing backslash, a NUL byte
// (which no argument can hold) or a value longer than MaxArgsSize is an
// *ArgsError. An empty or all-blank value gives no words.
func SplitArgs(s string) ([]string, error) {
	if len(s) > MaxArgsSize {
		return nil, &ArgsError{Offset: MaxArgsSize, Reason: fmt.Sprintf("%d bytes long, want at most %d", len(s), MaxArgsSize)}
	}
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case 0:
			return nil, &ArgsError{Offset: i, Reason: "NUL byte"}
		case ' ', '\t', '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, &ArgsError{Offset: i, Reason: "unterminated single quote"}
			}
			q := s[i+1 : i+1+end]
			if j := strings.IndexByte(q, 0); j >= 0 {
				return nil, &ArgsError{Offset: i + 1 + j, Reason: "NUL byte"}
			}
			cur.WriteString(q)
			inWord = true
			i += end + 1
		case '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				switch {
				case s[j] == 0:
					return nil, &ArgsError{Offset: j, Reason: "NUL byte"}
				case s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\'):
					j++
				}
				cur.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, &ArgsError{Offset: i, Reason: "unterminated double quote"}
			}
			inWord = true
			i = j
		case '\\':
			if i+1 >= len(s) {
				return nil, &ArgsError{Offset: i, Reason: "backslash at the end"}
			}
			if s[i+1] == 0 {
				return nil, &ArgsError{Offset: i + 1, Reason: "NUL byte"}
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// QuoteArgs is the inverse of SplitArgs: a value that SplitArgs turns back
// into words (each word single-quoted, a quote inside one written '\”).
// Words must not hold NUL bytes.
func QuoteArgs(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
