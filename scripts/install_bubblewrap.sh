#!/usr/bin/env bash
# Debian's bubblewrap and libseccomp: the box that runs strangers' code (python checks, python
# exam answers; identity/challenges/sandbox.py). Without them that code does not run at all.
# Idempotent: exits 0 at once when both are installed. Needs root and apt-get otherwise.
set -euo pipefail

has_seccomp() { ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; }
if command -v bwrap >/dev/null 2>&1 && has_seccomp; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_bubblewrap: no apt-get here; install bubblewrap and libseccomp2 yourself" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "install_bubblewrap: needs root (or passwordless sudo) to apt-get install bubblewrap" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "install_bubblewrap: installing Debian's bubblewrap and libseccomp2" >&2
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq bubblewrap libseccomp2 >/dev/null
if command -v bwrap >/dev/null 2>&1 && has_seccomp; then
  bwrap --version >&2
  exit 0
fi
echo "install_bubblewrap: apt-get finished but bwrap or libseccomp.so.2 is missing" >&2
exit 1
