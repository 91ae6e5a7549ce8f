#!/bin/sh
# Install Debian's chromium for the browser test (tests/test_report_browser.py).
# Playwright drives /usr/bin/chromium and never downloads a browser of its own.
set -eu
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
/usr/bin/chromium --version
