#!/usr/bin/env bash
# Debian's bubblewrap and libseccomp: the box that runs strangers' code (python checks, python
# exam answers; identity/challenges/sandbox.py). Without them that code does not run at all.
# Idempotent: exits 0 at once when both are installed. Needs root and apt-get otherwise.
set -euo pipefail

# grep reads ldconfig's whole listing: `grep -q` stops at the first match, ldconfig then dies of
# SIGPIPE, and under pipefail the check failed now and then with both installed.
installed() {
  command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null
}
installed && exit 0
"$(dirname "$0")/apt_install.sh" install_bubblewrap bubblewrap libseccomp2
if installed; then
  bwrap --version >&2
  exit 0
fi
echo "install_bubblewrap: apt-get finished but bwrap or libseccomp.so.2 is missing" >&2
exit 1
