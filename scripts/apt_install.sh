#!/usr/bin/env bash
# Install Debian packages with apt-get, as root or through passwordless sudo:
#   scripts/apt_install.sh WHO PACKAGE...
# WHO names the caller in messages. Exits 1, saying why, where there is no apt-get or no root.
set -euo pipefail

who=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$who: no apt-get here; install $* yourself" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "$who: needs root (or passwordless sudo) to apt-get install $*" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "$who: installing Debian's $*" >&2
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq "$@" >/dev/null
