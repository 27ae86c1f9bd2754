#!/usr/bin/env bash
# The README's test command again, on Node 22: the other supported major. The machines here run
# Node 20; Node 22 comes from npm's `node` package (the official binaries), fetched into npx's
# cache. If it cannot be fetched (no registry), this says so and runs nothing.
#
#   bash scripts/test-node22.sh        (after `npm ci`; .ci/run calls it after the Node 20 run)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! bin=$(npx --yes node@22 -p 'process.execPath' 2>/dev/null); then
  echo "Node 22 could not be fetched (npx node@22): the suite was not run on it"
  exit 0
fi
# Everything the tests start (kvgate processes, the CLI) takes `node` from PATH or process.execPath.
export PATH="$(dirname "$bin"):$PATH"
echo "node $(node --version) ($bin)"
npm test
