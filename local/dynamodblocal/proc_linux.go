package dynamodblocal

import "syscall"

// sysProcAttr puts java in its own process group (so Stop ends it and its
// children) and kills it if this process dies first: no orphan java.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
