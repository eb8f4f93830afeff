package e2e

// servingUID is the uid gopasta started by uid carries traffic as: root
// of the initial user namespace drops to nobody (internal/sandbox), anyone
// else stays who they are.
func servingUID(uid int) int {
	if uid == 0 {
		return 65534
	}
	return uid
}
