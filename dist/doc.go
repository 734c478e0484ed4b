// Package dist holds what `make package` turns into the mesh's packages; it holds no code.
//
// It turns into the node's .deb and its tarball floor — nfpm.yaml, the unit, the maintainer scripts
// in deb/, and tarball/install.sh and README — and into the release tool's .deb, tarballs and macOS
// binary — nfpm-release.yaml, mesh-release.service, release-deb/ and release-tarball/README
// (decision 0033). Both packages' man pages, completions and changelogs are written by dist/gendoc
// (a command, in its own directory) from the binaries' own --help; lintian/ holds the overrides
// each package installs. Its tests run `make package` and inspect the results the way an operator
// would (dpkg-deb, tar, lintian, systemd-analyze, bash), run install.sh and the maintainer scripts
// under temporary roots, and shellcheck the scripts. They live beside the files they test; release/
// is the fleet's release tool and knows nothing of operating-system packages.
// docs/decisions/0009-packaging.md says why the node's package looks as it does.
package dist
