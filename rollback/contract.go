package rollback

// The process contract between mesh-launcher and mesh-host, defined once. The launcher starts
// `mesh-host run` with these variables and descriptor; the host reads them; installing and
// staging run `mesh-host version` and `mesh-host preflight`. A launcher of one version runs
// hosts of many versions, and a host is started by launchers of many versions, so none of
// these may change meaning: a new need is a new name beside them. Everything here is checked to
// be spelled nowhere else in the launcher's and the host's code (rollback/contract_test.go).

// The environment the launcher sets for the host it starts (and which no other process's
// value may override: the launcher drops any inherited copy first, see EnvContract).
const (
	// EnvRoot is the root holding versions/ and records.db. The operator may set it for either
	// command too; the launcher always sets it for the host it starts.
	EnvRoot = "MESH_HOST_ROOT"
	// EnvVersion is the version the launcher started: the host refuses to run as another.
	EnvVersion = "MESH_HOST_VERSION"
	// EnvStartID is the launcher's record of this start (Records.BeginStart), so the host
	// confirms exactly this start.
	EnvStartID = "MESH_HOST_START_ID"
	// EnvAliveFD is the descriptor number of the liveness pipe's write end (AliveFD).
	EnvAliveFD = "MESH_HOST_ALIVE_FD"
	// EnvAliveInterval is how often the host should write to the liveness pipe, as a Go
	// duration ("5s").
	EnvAliveInterval = "MESH_HOST_ALIVE_INTERVAL"
)

// EnvContract lists every variable above: the launcher removes inherited copies of them from
// the environment it passes on, so only its own values reach the host.
var EnvContract = []string{EnvRoot, EnvVersion, EnvStartID, EnvAliveFD, EnvAliveInterval}

// AliveFD is the descriptor the host's liveness pipe arrives as: the first of exec.Cmd's
// ExtraFiles, after stdin, stdout and stderr.
const AliveFD = 3

// The words of mesh-host's command line the launcher and the host's own delivery use.
const (
	// CmdRun holds the node in its declared state; the launcher starts `mesh-host run`.
	CmdRun = "run"
	// CmdPreflight prints the version as its first line, then checks the binary can run on
	// this node; delivery runs it on a staged version before standing aside for it.
	CmdPreflight = "preflight"
	// CmdVersion prints the version as its first line; `mesh-launcher install` runs it.
	CmdVersion = "version"
)

// WindowWaitName is the file the host leaves in the root while it has staged a newer version
// and waits for its maintenance window to stand aside for it (decision 0029): written (temp,
// fsync, rename) when it begins to wait, removed before it stands aside and whenever it waits
// for nothing (WriteWindowWait). `mesh-launcher status`, which reads no bus, shows it; the
// launcher, until the window opens, restarts the version named Running in it rather than the
// newer one (Records.ChooseToStart, decision 0034). A host that leaves no Running holds nothing.
const WindowWaitName = "window-wait.json"

// TrustExpiredName is the file the host leaves in the root while the newest root of trust it
// holds has expired (decision 0045): written (temp, fsync, rename) when it expires, removed once
// a fresher root arrives (WriteTrustExpired). `mesh-launcher status` says `trust expired since
// T` from it; nothing else reads it, and nothing expiring stops or restarts a host.
const TrustExpiredName = "trust-expired.json"

// Exit statuses the two sides agree on.
const (
	// HostExitClean is the host's exit when it stopped on purpose: standing aside for the
	// version the records now choose. Any other exit, or a clean one while the records still
	// choose the same version, is a failure of that start.
	HostExitClean = 0
	// ExitFailed is the launcher's exit when it stops in its failed state: the unit names it in
	// RestartPreventExitStatus= so systemd does not start it again and again. `mesh-launcher
	// status` exits with it too when the node is failed.
	ExitFailed = 3
	// ExitDegraded is `mesh-launcher status`'s exit when the node is degraded: the host is
	// crash-looping, was killed as hung, or is not running.
	ExitDegraded = 4
)
