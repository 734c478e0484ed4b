//go:build !linux

package main

// dieWithParent does nothing where the kernel cannot signal a process when its parent exits.
func dieWithParent() error { return nil }
