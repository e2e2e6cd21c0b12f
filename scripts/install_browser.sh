#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the explorer's browser test (tests/api/test_explorer.py).
# Idempotent: exits 0 at once when both are already installed. Needs root and apt-get otherwise.
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no apt-get here; install chromium and chromedriver yourself" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "install_browser: needs root (or passwordless sudo) to apt-get install chromium" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "install_browser: installing Debian's chromium and chromium-driver" >&2
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq chromium chromium-driver >/dev/null
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
  /usr/bin/chromium --version >&2 || true
  exit 0
fi
echo "install_browser: apt-get finished but /usr/bin/chromium or /usr/bin/chromedriver is missing" >&2
exit 1
