// Package systemd is a lab of real systemd nodes: Debian booted with systemd as PID 1 under
// systemd-nspawn.
//
// The Debian is bookworm; each node its own network namespace veth-paired into a lab bridge
// namespace where the bus listens on a private address (10.77.0.1:4222) the lab made. The bus is
// served in this process without authentication, or is one the caller runs on this machine
// (Options.Bus), such as the real `mesh-release serve` in operator mode: the lab relays the bridge
// address to it, TLS passing through untouched, so its certificate must name 10.77.0.1.
//
// Its guarantees, each one a test or a check the harness makes on itself:
//   - The rootfs is built once per set of inputs (suite, variant, packages, mirror, architecture)
//     and cached as a tar.zst under CacheDir; a build that fails or is interrupted leaves no cache
//     entry (temp path, fsync, rename), and concurrent builders wait for one another (internal/filelock).
//   - Nodes share one read-only base; each has its own writable layer, /etc/machine-id and
//     hostname, so nothing one node writes is seen by another or by the next run.
//   - Only namespaces the lab made carry lab traffic: the host's own network namespace gets no
//     device, address or route.
//   - `systemctl reboot` inside a node boots it again on the same layer and network namespace:
//     systemd-nspawn exits 133 on a reboot and the lab starts it again, as
//     systemd-nspawn@.service would — but never once teardown has begun.
//   - The lab stops what it started by pid and removes its namespaces and mounts — on Close, when
//     a test fails (Close is a t.Cleanup) and on SIGINT/SIGTERM; CheckGone proves nothing is left.
//   - Where nspawn cannot run (not root, no systemd-nspawn and no apt-get to install it) the suite
//     skips, saying why; it never passes silently.
//
// The appliers that need a real machine — service (systemd over D-Bus) and package (dpkg, apt)
// — are proven in its nodes, never on this machine: one resource at a time through the applyone
// driver (TestAppliersInNode), and through the packaged host (`mesh-host apply`, a declaration
// over the bus kept against drift by the timer). The .debs they install are built by the tests
// with dpkg-deb; the apt path reads a flat repository the test writes into the node, since the
// nodes reach no mirror.
//
// Control goes through `nsenter -t <the container's PID 1> -a`: with no systemd on the machine
// itself, `machinectl` and `systemctl -M` have nothing to talk to.
package systemd
