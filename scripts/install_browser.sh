#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the explorer's browser test (tests/api/test_explorer.py).
# Idempotent: exits 0 at once when both are already installed. Needs root and apt-get otherwise.
set -euo pipefail

installed() { [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; }
installed && exit 0
"$(dirname "$0")/apt_install.sh" install_browser chromium chromium-driver
if installed; then
  /usr/bin/chromium --version >&2 || true
  exit 0
fi
echo "install_browser: apt-get finished but /usr/bin/chromium or /usr/bin/chromedriver is missing" >&2
exit 1
