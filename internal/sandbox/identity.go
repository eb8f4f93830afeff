package sandbox

// The identity the confined process takes: nobody or --runas, translated
// into the user namespace it runs in, and the change itself.

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Nobody is the identity root of the initial user namespace drops to when
// no --runas says otherwise, as pasta does: the "nobody" user and its group
// from the user database, else 65534:65534.
func nobody() (uid, gid int) {
	uid, gid = 65534, 65534
	if u, err := user.Lookup("nobody"); err == nil {
		if n, err := strconv.Atoi(u.Uid); err == nil {
			uid = n
		}
		if n, err := strconv.Atoi(u.Gid); err == nil {
			gid = n
		}
	}
	return uid, gid
}

// idMap is one line of /proc/PID/uid_map or gid_map: ids [inside,
// inside+count) of our user namespace are [outside, outside+count) of its
// parent.
type idMap struct{ inside, outside, count uint64 }

func parseIDMap(s string) ([]idMap, error) {
	var m []idMap
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("id map line %q: want 3 fields", line)
		}
		var v [3]uint64
		for i := range f {
			n, err := strconv.ParseUint(f[i], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("id map line %q: %w", line, err)
			}
			v[i] = n
		}
		m = append(m, idMap{v[0], v[1], v[2]})
	}
	if len(m) == 0 {
		return nil, errors.New("empty id map")
	}
	return m, nil
}

// initialNS reports whether m is the initial user namespace's map, the
// whole id range mapped to itself.
func initialNS(m []idMap) bool {
	return len(m) == 1 && m[0] == idMap{0, 0, 4294967295}
}

// toInside translates an id of the parent namespace into ours.
func toInside(m []idMap, id int) (int, bool) {
	for _, l := range m {
		if uint64(id) >= l.outside && uint64(id) < l.outside+l.count {
			return int(l.inside + uint64(id) - l.outside), true
		}
	}
	return 0, false
}

func readIDMap(path string) ([]idMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseIDMap(string(b))
}

// identity is the uid and gid gopasta runs as once confined.
type identity struct {
	uid, gid int
	change   bool // setresuid/setresgid needed
	initial  bool // in the initial user namespace
}

// chooseIdentity decides who we become: --runas if given (ids of the
// namespace gopasta was started in, translated into ours when we are the
// copy re-executed in a user namespace of its own), nobody for root of the
// initial user namespace, and otherwise who we are. Rootless gopasta is
// root of a user namespace that maps only its user's id: there is nobody
// else to become, and that root is the unprivileged user outside.
func chooseIdentity(runAs *RunAs, runAsInParent bool) (identity, error) {
	uids, err := readIDMap("/proc/self/uid_map")
	if err != nil {
		return identity{}, &Error{Step: "reading our uid map", Err: err}
	}
	gids, err := readIDMap("/proc/self/gid_map")
	if err != nil {
		return identity{}, &Error{Step: "reading our gid map", Err: err}
	}
	id := identity{uid: os.Geteuid(), gid: os.Getegid(), initial: initialNS(uids)}
	switch {
	case runAs != nil:
		u, g := runAs.UID, runAs.GID
		if runAsInParent {
			var okU, okG bool
			if u, okU = toInside(uids, runAs.UID); !okU {
				return id, &Error{Step: "--runas", Err: fmt.Errorf("uid %d is not mapped in gopasta's user namespace", runAs.UID)}
			}
			if g, okG = toInside(gids, runAs.GID); !okG {
				return id, &Error{Step: "--runas", Err: fmt.Errorf("gid %d is not mapped in gopasta's user namespace", runAs.GID)}
			}
		}
		id.uid, id.gid, id.change = u, g, true
	case id.uid == 0 && id.initial:
		id.uid, id.gid = nobody()
		id.change = true
	}
	return id, nil
}

// RunAs is who --runas asks for.
type RunAs struct{ UID, GID int }

// become switches every thread to id: supplementary groups cleared, then
// real, effective, saved and file system gid and uid (the standard
// library's calls act on all threads). Clearing the groups is allowed to
// fail only where setgroups(2) is denied (a user namespace of an
// unprivileged user), which has no groups to clear.
func become(id identity) error {
	if err := syscall.Setgroups(nil); err != nil && !(errors.Is(err, unix.EPERM) && !id.initial) {
		return &Error{Step: "clearing supplementary groups", Err: err}
	}
	if !id.change {
		return nil
	}
	if err := syscall.Setresgid(id.gid, id.gid, id.gid); err != nil {
		return &Error{Step: "setting gid " + strconv.Itoa(id.gid), Err: err}
	}
	if err := syscall.Setresuid(id.uid, id.uid, id.uid); err != nil {
		return &Error{Step: "setting uid " + strconv.Itoa(id.uid), Err: err}
	}
	return nil
}
