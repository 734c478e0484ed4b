#!/bin/sh
# install.sh: installs mesh-host from this directory as the .deb does, on a machine with no package
# manager, no package repository and no network (seed 000: the tarball is the path that is never
# allowed to acquire a dependency). It needs only a POSIX sh and cp, mv, rm, mkdir, rmdir, chmod,
# id, sync and uname; systemctl when the machine has it.
#
#   ./install.sh [--root DIR]                       install, or upgrade in place
#   ./install.sh --uninstall [--purge] [--root DIR] stop and remove; --purge also deletes the state
#
# --root (or MESH_INSTALL_ROOT) installs under DIR instead of /: an image being built, or a test.
# There the unit is enabled with `systemctl --root` and nothing is started.
set -eu

# The architecture this tarball's binaries are built for, as Debian names it: `make package`
# stamps this line in each tarball's copy.
tarball_arch=unstamped
unit=mesh-launcher.service
state=/var/lib/mesh-host

usage() {
	cat <<USAGE
usage: ./install.sh [--root DIR]
       ./install.sh --uninstall [--purge] [--root DIR]
Installs /usr/bin/mesh-launcher, /usr/share/mesh-host/mesh-host and the unit
/lib/systemd/system/$unit, seeds the host into $state with
\`mesh-launcher install\`, then enables and starts the unit; a running launcher that
takes the new binary itself is left running, with its host. --uninstall stops and
removes them and keeps $state (versions, records, host.json) unless --purge.
--root DIR (or MESH_INSTALL_ROOT) does all of it under DIR and starts nothing.
USAGE
}

say() { echo "install.sh: $*"; }
die() {
	echo "install.sh: $*" >&2
	exit 1
}

root=${MESH_INSTALL_ROOT:-}
mode=install
purge=no
while [ $# -gt 0 ]; do
	case "$1" in
	--root)
		[ $# -ge 2 ] || die "--root needs a directory"
		root=$2
		shift 2
		;;
	--root=*)
		root=${1#--root=}
		shift
		;;
	--uninstall)
		mode=uninstall
		shift
		;;
	--purge)
		purge=yes
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "install.sh: unknown argument '$1'" >&2
		usage >&2
		exit 2
		;;
	esac
done
[ "$purge" = no ] || [ "$mode" = uninstall ] || die "--purge goes with --uninstall"

# debian_arch WORD: Debian's name for what a kernel calling its machine WORD (uname -m) runs, or
# nothing for a machine no tarball is built for. ARMv8 kernels running 32-bit say armv8l.
debian_arch() {
	case "$1" in
	x86_64 | amd64) echo amd64 ;;
	aarch64 | arm64) echo arm64 ;;
	armv7* | armv8l) echo armhf ;;
	esac
}

# Binaries of another architecture would not run (or run only under an emulator): refuse, naming
# both, before anything is written. --uninstall removes files of any architecture.
if [ "$mode" = install ]; then
	case "$tarball_arch" in
	amd64 | arm64 | armhf) ;;
	*) die "this install.sh names no architecture ($tarball_arch): use the one in a tarball \`make package\` built" ;;
	esac
	machine=$(uname -m)
	have=$(debian_arch "$machine")
	if [ -z "$have" ]; then
		die "this tarball is for $tarball_arch; this machine is $machine, for which mesh-host is not built (amd64, arm64, armhf)"
	elif [ "$have" != "$tarball_arch" ]; then
		die "this tarball is for $tarball_arch; this machine is $machine ($have): install the $have tarball"
	fi
fi

# The files come from beside this script, wherever it is run from.
case "$0" in
*/*) here=${0%/*} ;;
*) here=. ;;
esac
here=$(cd "$here" && pwd)

# root is "" for the machine itself, else an absolute path without a trailing slash.
case "$root" in
"" | /) root= ;;
*)
	mkdir -p "$root"
	root=$(cd "$root" && pwd)
	[ "$root" != / ] || root=
	;;
esac

if [ -z "$root" ]; then
	[ "$(id -u)" = 0 ] || die "run as root (or give --root DIR to install under another directory)"
	# Files dpkg owns are dpkg's to replace or remove.
	if command -v dpkg-query >/dev/null 2>&1; then
		case "$(dpkg-query -W -f='${Status}' mesh-host 2>/dev/null || true)" in
		*" installed") die "mesh-host is installed as a package here; upgrade or remove it with apt or dpkg" ;;
		esac
	fi
fi

# systemd is "running" when the machine itself is the target and booted with it; under --root,
# or in a chroot or a container without it, units are enabled offline and nothing is started.
systemctl_found() { command -v systemctl >/dev/null 2>&1; }
systemd_running() { [ -z "$root" ] && [ -d /run/systemd/system ]; }

# in_unit: this script runs inside the unit's own cgroup (the host running it): restarting the
# unit from here would stop the host, and this script with it.
in_unit() {
	[ -r /proc/self/cgroup ] || return 1
	while IFS= read -r line; do
		case "$line" in
		*/"$unit" | */"$unit"/*) return 0 ;;
		esac
	done </proc/self/cgroup
	return 1
}

# place SRC DST MODE: a temp file beside DST, synced, then renamed over it, so DST is never
# missing or half-written, and a running launcher keeps its old binary until it restarts.
tmp=
trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT
place() {
	mkdir -p "${2%/*}"
	tmp="$2.install-$$"
	cp "$1" "$tmp"
	chmod "$3" "$tmp"
	sync "$tmp" 2>/dev/null || sync
	mv -f "$tmp" "$2"
	tmp=
}

install_files() {
	for f in mesh-launcher mesh-host "$unit"; do
		[ -f "$here/$f" ] || die "$here/$f is missing: unpack the whole tarball and run install.sh from it"
	done
	place "$here/mesh-launcher" "$root/usr/bin/mesh-launcher" 0755
	place "$here/mesh-host" "$root/usr/share/mesh-host/mesh-host" 0755
	place "$here/$unit" "$root/lib/systemd/system/$unit" 0644

	# As the package's postinst: the seed goes beside whatever the node has (versions and records
	# are never removed), and the launcher runs the newest good version, so re-running an older
	# tarball never downgrades a node that runs a newer delivered version.
	"$root/usr/bin/mesh-launcher" install --root "$root$state" "$root/usr/share/mesh-host/mesh-host"

	# As the package's postinst: MESH_ENROL_TOKEN enrols the node once, before the unit starts
	# (docs/decisions/0011); the token goes on stdin; a failed enrolment is said, not fatal.
	if [ -n "${MESH_ENROL_TOKEN:-}" ]; then
		if [ -e "$root$state/node.creds" ]; then
			say "this node is enrolled already ($state/node.creds); MESH_ENROL_TOKEN is not used (to enrol it again: /usr/share/mesh-host/mesh-host enrol --replace TOKEN)"
		elif ! printf '%s\n' "$MESH_ENROL_TOKEN" | "$root/usr/share/mesh-host/mesh-host" enrol --root "$root$state" -; then
			say "enrolment with MESH_ENROL_TOKEN failed (said above); the node is installed without credentials for the mesh. Get a new token (mesh-release enrol-token), run \`/usr/share/mesh-host/mesh-host enrol TOKEN\`, then \`systemctl restart $unit\`" >&2
		fi
	fi

	if ! systemctl_found; then
		say "systemctl not found: $unit is installed but not enabled; on this machine under systemd, run \`systemctl enable --now $unit\`"
		return 0
	fi
	if ! systemd_running; then
		if [ -n "$root" ]; then
			if systemctl --root="$root" enable "$unit"; then
				say "$unit enabled under $root; it starts when that system boots"
			else
				say "could not enable $unit under $root; run \`systemctl enable --now $unit\` on that system"
			fi
		elif systemctl enable "$unit" >/dev/null 2>&1; then
			say "systemd is not running here; $unit is enabled and starts at boot"
		else
			say "systemd is not running here; run \`systemctl enable --now $unit\` on the booted machine"
		fi
		return 0
	fi
	systemctl daemon-reload
	if [ "$(systemctl is-enabled "$unit" 2>/dev/null || true)" = masked ]; then
		say "$unit is masked; not enabling or starting it"
		return 0
	fi
	systemctl enable "$unit"
	# As the package's postinst (seed 000: an upgrade never stops the host): the running launcher
	# is asked, through the image it runs, whether it takes the new binary by exec; one older than
	# the question exits 2. A changed unit file waits for the unit's next start either way.
	pid=$(systemctl show -p MainPID --value "$unit" 2>/dev/null || true)
	case "$pid" in
	"" | 0 | *[!0-9]*) pid= ;;
	esac
	if [ -n "$pid" ] && "/proc/$pid/exe" supports takeover >/dev/null 2>&1; then
		say "$unit keeps running (pid $pid): its launcher takes the new /usr/bin/mesh-launcher without stopping the host; a changed unit file takes effect at the unit's next start"
	elif [ -n "$pid" ] && in_unit; then
		say "$unit runs a launcher (pid $pid) that cannot take a new binary, and this runs inside it: not restarting it; the new launcher runs at the unit's next start"
	# restart, not start: the running launcher is the old binary and cannot take the new one.
	elif systemctl restart "$unit"; then
		say "$unit is running; \`mesh-launcher status\` shows the host"
	else
		say "$unit did not start; see \`systemctl status $unit\` and \`mesh-launcher status\`" >&2
	fi
}

uninstall_files() {
	if ! systemctl_found; then
		# What `systemctl enable` would have made, had there been one.
		rm -f "$root/etc/systemd/system/multi-user.target.wants/$unit"
	elif [ -n "$root" ]; then
		systemctl --root="$root" disable "$unit" || true
	elif systemd_running; then
		systemctl disable --now "$unit" || say "could not stop $unit cleanly; see \`systemctl status $unit\`" >&2
	else
		systemctl disable "$unit" >/dev/null 2>&1 || true
	fi
	rm -f "$root/usr/bin/mesh-launcher" "$root/usr/share/mesh-host/mesh-host" "$root/lib/systemd/system/$unit"
	rmdir "$root/usr/share/mesh-host" 2>/dev/null || true
	if systemd_running; then
		systemctl daemon-reload || true
	fi
	if [ "$purge" = yes ]; then
		rm -rf "$root$state"
		say "removed mesh-host and $root$state"
	else
		say "removed mesh-host; kept $root$state (versions, records, host.json): --uninstall --purge removes it"
	fi
}

case "$mode" in
install) install_files ;;
uninstall) uninstall_files ;;
esac
