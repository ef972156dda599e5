package once_test

import "syscall"

// dieWithParent makes DynamoDB Local die with the test binary, even when a
// timeout kills it before TestMain stops it.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
