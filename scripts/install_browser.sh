#!/usr/bin/env bash
# Install Debian's Chromium for the browser test, only when it is missing.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version >&2
