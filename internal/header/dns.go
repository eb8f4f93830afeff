package header

// EncodeDNSName writes name in DNS wire format (RFC 1035 section 3.1:
// length-prefixed labels ending with a zero byte, no compression) into b and
// returns the length. ok is false, with nothing meaningful written, when a
// label is empty or longer than 63 bytes, the whole name exceeds 255 bytes,
// or b is too short. One trailing dot is accepted; "" and "." are the root.
func EncodeDNSName(b []byte, name string) (n int, ok bool) {
	if len(name) > 0 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	if len(name)+2 > 255 || len(name)+2 > len(b) && name != "" || len(b) < 1 {
		return 0, false
	}
	for start := 0; start < len(name); {
		end := start
		for end < len(name) && name[end] != '.' {
			end++
		}
		l := end - start
		if l == 0 || l > 63 {
			return 0, false
		}
		b[n] = uint8(l)
		copy(b[n+1:], name[start:end])
		n += 1 + l
		start = end + 1
		if end == len(name)-1 {
			// "a..": the final dot was stripped; "a." leaves an empty label.
			return 0, false
		}
	}
	b[n] = 0
	return n + 1, true
}

// EncodeDNSSearchList writes names, a DNS search list, into b as DNS names
// one after another (EncodeDNSName, no compression): the form of DHCP
// option 119 (RFC 3397), of the DHCPv6 domain list (RFC 3646) and of the
// NDP DNSSL option (RFC 8106). It returns the length written, 0 for none.
// Left out are names that cannot be encoded, names that no longer fit in
// b, and the root, which a reader could not tell from the end of the list
// (or from DNSSL's zero padding).
func EncodeDNSSearchList(b []byte, names []string) int {
	n := 0
	for _, name := range names {
		if l, ok := EncodeDNSName(b[n:], name); ok && l > 1 {
			n += l
		}
	}
	return n
}
