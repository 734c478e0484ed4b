package wire

// The spec of each resource kind (docs/wire.md, "Declaration"). Every spec is decoded strictly
// (DecodeStrict): a key that is not one of these fields refuses the whole declaration, naming
// its path (resources[3].spec.mode: unknown field). Paths are absolute; modes are octal strings
// ("0644"); owner and group are a name or a numeric id, and left as they are when empty.
//
// A source is a digest ("sha256:<64 hex>") naming a blob: over the link it is read from the
// blobs object store (Names.Blobs, object name = the digest); from a bundle, from
// <bundle dir>/blobs/sha256/<hex>. Either way it is verified before use.

// DirectorySpec is a directory: path (default: the resource id), mode (default "0755").
type DirectorySpec struct {
	Path  string `json:"path,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
}

// FileSpec is a regular file with exactly one of content or source; mode default "0644".
type FileSpec struct {
	Path    string  `json:"path,omitempty"`
	Content *string `json:"content,omitempty"`
	Source  string  `json:"source,omitempty"`
	Mode    string  `json:"mode,omitempty"`
	Owner   string  `json:"owner,omitempty"`
	Group   string  `json:"group,omitempty"`
}

// ArchiveSpec is a tar+zstd archive (source, required) extracted into the directory path
// (default: the resource id) by the strict extractor: regular files and directories only.
type ArchiveSpec struct {
	Path   string `json:"path,omitempty"`
	Source string `json:"source"`
	Owner  string `json:"owner,omitempty"`
	Group  string `json:"group,omitempty"`
}

// ServiceSpec is a systemd unit (unit: default the resource id). Enabled nil and State ""
// leave that side alone; State is "running" or "stopped". UnitFile, when set, is the content
// of /etc/systemd/system/<unit>; the unit is restarted when it changed while running.
type ServiceSpec struct {
	Unit     string  `json:"unit,omitempty"`
	Enabled  *bool   `json:"enabled,omitempty"`
	State    string  `json:"state,omitempty"`
	UnitFile *string `json:"unit_file,omitempty"`
}

// PackageSpec is a Debian package (name: default the resource id), present at any version or
// at Version. With Source (a .deb blob) it is installed with dpkg; otherwise with apt-get from
// the machine's own repositories. Never uninstalled: no longer declared, it is forgotten.
type PackageSpec struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
}

// ContainerSpec is a container (name: default the resource id) run by Docker or Podman
// (Runtime "docker", "podman" or "" for the one the profile found working) from an image pinned
// by digest (repo@sha256:<hex>). It is labelled with a digest of this spec and replaced when
// the spec changes.
type ContainerSpec struct {
	Name    string            `json:"name,omitempty"`
	Image   string            `json:"image"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Ports   []string          `json:"ports,omitempty"`
	Volumes []string          `json:"volumes,omitempty"`
	Restart string            `json:"restart,omitempty"`
	Runtime string            `json:"runtime,omitempty"`
}

// ActionSpec is a command run only when its verify command fails (exit status not 0); after it
// runs, verify must pass. Accepted only from a local bundle (ParseTrustedDeclaration).
type ActionSpec struct {
	Command []string `json:"command"`
	Verify  []string `json:"verify"`
}
