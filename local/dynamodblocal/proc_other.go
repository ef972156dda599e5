//go:build !linux

package dynamodblocal

import "syscall"

// sysProcAttr puts java in its own process group so Stop ends it.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
