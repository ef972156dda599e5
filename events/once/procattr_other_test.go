//go:build !linux

package once_test

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
