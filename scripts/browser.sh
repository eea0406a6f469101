#!/usr/bin/env bash
# Make sure Debian's headless Chromium and its chromedriver are installed, for the view's browser
# tests (tests/analysis/test_view.py, marker `browser`; Selenium drives the system browser, so no
# browser build is downloaded at test time). About 50 s and ~300 MB the first time, then nothing.
#
#   bash scripts/browser.sh ensure   # both present? nothing to do. Else (root): apt-get install
set -euo pipefail
me="browser.sh"

present() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

case "${1:-ensure}" in
  ensure)
    present && exit 0
    if [ "$(id -u)" != 0 ]; then
      echo "$me: chromium/chromedriver missing and not root: apt-get install chromium" \
           "chromium-driver, or the browser tests skip (they fail under CI=true)" >&2
      exit 0
    fi
    echo "$me: installing chromium and chromium-driver with apt-get"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
           chromium chromium-driver; } </dev/null >/tmp/swarmlab-apt-browser.log 2>&1; then
      echo "$me: installing chromium failed; see /tmp/swarmlab-apt-browser.log" >&2
      tail -n 20 /tmp/swarmlab-apt-browser.log >&2 || true
      exit 1
    fi
    present
    ;;
  *)
    echo "usage: $0 ensure" >&2
    exit 2
    ;;
esac
