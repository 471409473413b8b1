#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the commit a release records (//:release
# stamps it into nfn --version), with -dirty where tracked files differ from it.
commit=$(git rev-parse HEAD 2>/dev/null) || { echo "STABLE_NFN_COMMIT unknown"; exit 0; }
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
echo "STABLE_NFN_COMMIT $commit"
