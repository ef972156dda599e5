//go:build !linux

package idempotency_test

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
