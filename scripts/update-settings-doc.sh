#!/usr/bin/env bash
# Regenerates docs/settings.md below its introduction from `dtrain settings
# --markdown` (a test fails when the two disagree).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${1:-build/src/cli/dtrain}
intro=$(sed -n '1,/^## Environment variables/p' docs/settings.md | sed '$d')
{ printf '%s\n\n' "$intro"; "$dtrain" settings --markdown; } > docs/settings.md.tmp
mv docs/settings.md.tmp docs/settings.md
