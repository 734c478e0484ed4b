package main

// Placeholders replaced by the delivery work (issue 4): keygen, build, publish, target.

import (
	"context"
	"errors"
)

func runKeygen(context.Context, []string) error  { return errors.New("not built yet") }
func runBuild(context.Context, []string) error   { return errors.New("not built yet") }
func runPublish(context.Context, []string) error { return errors.New("not built yet") }
func runTarget(context.Context, []string) error  { return errors.New("not built yet") }
