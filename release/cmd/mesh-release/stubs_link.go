package main

// Placeholders replaced by the link work (issue 3): serve, init, declare, fleet.

import (
	"context"
	"errors"
)

func runServe(context.Context, []string) error   { return errors.New("not built yet") }
func runInit(context.Context, []string) error    { return errors.New("not built yet") }
func runDeclare(context.Context, []string) error { return errors.New("not built yet") }
func runFleet(context.Context, []string) error   { return errors.New("not built yet") }
