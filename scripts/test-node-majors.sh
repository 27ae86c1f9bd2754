#!/usr/bin/env bash
# The README's test command again on each other supported major: 22, 24 and 26 (Node 20, the
# machines' own, runs it first). Each comes from npm's `node` package (the official binaries),
# fetched into npx's cache, so the build machine needs no second install. A major that cannot be
# fetched (no registry) is said so and skipped; a failing run fails the script.
#
#   bash scripts/test-node-majors.sh           (after `npm ci`; .ci/run calls it after the Node 20 run)
#   bash scripts/test-node-majors.sh 24        (one major)
set -euo pipefail
cd "$(dirname "$0")/.."

MAJORS=(22 24 26)
if [ "$#" -gt 0 ]; then MAJORS=("$@"); fi

for major in "${MAJORS[@]}"; do
  if ! bin=$(npx --yes "node@$major" -p 'process.execPath' 2>/dev/null); then
    echo "Node $major could not be fetched (npx node@$major): the suite was not run on it"
    continue
  fi
  # Everything the tests start (kvgate processes, the CLI) takes `node` from PATH or process.execPath.
  echo "node $(PATH="$(dirname "$bin"):$PATH" node --version) ($bin)"
  PATH="$(dirname "$bin"):$PATH" npm test
done
