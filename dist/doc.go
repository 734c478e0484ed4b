// Package dist holds no code: it is what `make package` turns into a node's .deb and its tarball
// floor — nfpm.yaml, the unit, the maintainer scripts in deb/, and tarball/install.sh and README.
// Its tests run `make package` and inspect both results the way an operator would (dpkg-deb, tar),
// run install.sh under a temporary root, and shellcheck the scripts. They live beside the files
// they test; release/ is the fleet's release tool and knows nothing of operating-system packages.
// docs/decisions/0009-packaging.md says why the package looks as it does.
package dist
