package wire

import (
	"strings"
	"testing"
)

func TestCheckManagedPathRefusesWhatTheInstallationOwnsAfterCleaning(t *testing.T) {
	for _, tc := range []struct {
		path, root, want string
	}{
		{"/var/lib/mesh-host", "", "is inside /var/lib/mesh-host"},
		{"/var/lib/mesh-host/../mesh-host/versions/v9.9.9/mesh-host", "", "is inside /var/lib/mesh-host"},
		{"//var/lib/mesh-host/", "", "is inside /var/lib/mesh-host"},
		{"/var/lib/mesh-host/./store.db", "", "is inside /var/lib/mesh-host"},
		{"/var/lib/./mesh-host/records.db", "", "is inside /var/lib/mesh-host"},
		{"/srv/../var/lib/mesh-host/host.json", "", "is inside /var/lib/mesh-host"},
		{"/usr/bin/mesh-launcher", "", "is inside /usr/bin/mesh-launcher"},
		{"/usr/bin//mesh-launcher", "", "is inside /usr/bin/mesh-launcher"},
		{"/bin/mesh-launcher", "", "is inside /bin/mesh-launcher"},
		{"/usr/share/mesh-host/mesh-host", "", "is inside /usr/share/mesh-host"},
		{"/etc/systemd/system/mesh-launcher.service.d/x.conf", "", "names mesh-launcher.service.d, the launcher's own unit"},
		{"/etc/systemd/system/mesh-launcher.service", "", "names mesh-launcher.service"},
		{"/etc/systemd/system/multi-user.target.wants/mesh-launcher.service", "", "names mesh-launcher.service"},
		{"/usr/lib/systemd/system/mesh-launcher.service", "", "names mesh-launcher.service"},
		{"/usr/local/lib/systemd/system/mesh-launcher.timer", "", "names mesh-launcher.timer"},
		{"/run/systemd/system/mesh-launcher.service.d", "", "names mesh-launcher.service.d"},
		{"/etc/systemd/system/mesh-launcher.socket", "", "names mesh-launcher.socket"},
		{"/srv/mesh/host.json", "/srv/mesh", "is inside /srv/mesh"},
		{"/srv/mesh", "/srv/mesh/", "is inside /srv/mesh"},
		{"/var/lib/mesh-host/x", "/srv/mesh", "is inside /var/lib/mesh-host"}, // the default stays protected
		{"relative/path", "", "is not absolute"},
		{"", "", "is not absolute"},
		{"/", "", "is the filesystem root"},
		{"/..", "", "is the filesystem root"},
		{"/srv/a\x00b", "", "contains a NUL byte"},
	} {
		err := CheckManagedPath(tc.path, tc.root)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckManagedPath(%q, %q) = %v, want %q", tc.path, tc.root, err, tc.want)
		}
	}
}

func TestCheckManagedPathAllowsNeighboursAndAncestors(t *testing.T) {
	for _, p := range []string{
		"/var/lib", "/var", "/usr/bin", "/var/lib/mesh-hostess", "/var/lib/mesh-host.bak",
		"/usr/bin/mesh-launcher2", "/etc/systemd/system/app.service", "/etc/systemd/system/app.service.d/mesh-launcher.conf",
		"/etc/mesh-launcher.service", // not a systemd directory
		"/srv/mesh/x",                // another host's root, when this one's is the default
	} {
		if err := CheckManagedPath(p, ""); err != nil {
			t.Errorf("CheckManagedPath(%q) = %v", p, err)
		}
	}
}

func TestCheckManagedTreeRefusesAnAncestorOfWhatIsProtected(t *testing.T) {
	for _, tc := range []struct{ path, root, want string }{
		{"/var/lib", "", "holds /var/lib/mesh-host"},
		{"/var", "", "holds /var/lib/mesh-host"},
		{"/usr", "", "holds /usr/bin/mesh-launcher"},
		{"/srv", "/srv/mesh", "holds /srv/mesh"},
		{"/var/lib/mesh-host/x", "", "is inside /var/lib/mesh-host"},
	} {
		err := CheckManagedTree(tc.path, tc.root)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckManagedTree(%q, %q) = %v, want %q", tc.path, tc.root, err, tc.want)
		}
	}
	for _, p := range []string{"/srv/app", "/etc/systemd/system", "/var/lib/app", "/opt"} {
		if err := CheckManagedTree(p, ""); err != nil {
			t.Errorf("CheckManagedTree(%q) = %v", p, err)
		}
	}
}

func TestCheckManagedUnitRefusesTheLauncherByAnyName(t *testing.T) {
	for _, tc := range []struct{ unit, want string }{
		{"mesh-launcher.service", "is the launcher's own unit"},
		{"mesh-launcher", "is the launcher's own unit"},
		{"mesh-launcher.service.d", "is the launcher's own unit"},
		{"mesh-launcher.timer", "would start or change the launcher's own unit"},
		{"mesh-launcher.socket", "would start or change"},
		{"mesh-launcher.path", "would start or change"},
		{"", "unit name is empty"},
		{"../mesh-launcher.service", "holds no '/'"},
		{"a\x00.service", "holds no '/' or NUL"},
	} {
		err := CheckManagedUnit(tc.unit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckManagedUnit(%q) = %v, want %q", tc.unit, err, tc.want)
		}
	}
	for _, u := range []string{"app.service", "mesh-launcher-helper.service", "mesh-launcher@x.service", "nginx.service"} {
		if err := CheckManagedUnit(u); err != nil {
			t.Errorf("CheckManagedUnit(%q) = %v", u, err)
		}
	}
}
