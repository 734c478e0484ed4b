package systemd

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// The lab's network: a bridge namespace holding br0 (BridgeAddr/24), and one namespace per node
// whose eth0 is veth-paired to a port on br0. Nothing is added to the machine's own namespace.
const (
	BridgeAddr = "10.77.0.1"
	subnetBits = "/24"
)

// NodeAddr is the address of the i-th node (from 0) on the lab bridge.
func NodeAddr(i int) string { return fmt.Sprintf("10.77.0.%d", i+2) }

// ip runs iproute2, naming the command in its error.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addBridgeNS makes the lab's bridge namespace.
func addBridgeNS(ctx context.Context, ns string) error {
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "br0", "type", "bridge"},
		{"-n", ns, "addr", "add", BridgeAddr + subnetBits, "dev", "br0"},
		{"-n", ns, "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("lab bridge namespace: %w", err)
		}
	}
	return nil
}

// addNodeNS makes a node's namespace, its eth0 at addr, and the bridge port port paired to it.
func addNodeNS(ctx context.Context, bridgeNS, ns, port, addr string) error {
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", bridgeNS, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", bridgeNS, "link", "set", port, "master", "br0"},
		{"-n", bridgeNS, "link", "set", port, "up"},
		{"-n", ns, "addr", "add", addr + subnetBits, "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("node namespace %s: %w", ns, err)
		}
	}
	return nil
}

// setPort brings a bridge port down (the node is cut off) or up (it returns).
func setPort(ctx context.Context, bridgeNS, port string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip(ctx, "-n", bridgeNS, "link", "set", port, state)
}

// delNS removes a namespace and, with it, every device in it (a veth takes its peer along).
func delNS(ctx context.Context, ns string) error {
	return ip(ctx, "netns", "delete", ns)
}
