#!/usr/bin/env bash
# What travels to the device machine is the checkout's tracked and untracked-not-ignored files, at most 64 MiB with
# the carried paths; the repository is ~80 MB (the two shipped models). This takes paths out of the *index* and
# ignores them for one call (nothing is committed): c1 sends no model, c2 no Qwen model, results nor tests;
# restore puts the index back as HEAD has it (each call starts with `git reset`: staged changes are unstaged, the
# working tree is untouched). Do not commit between c1/c2 and restore.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
git reset -q
sed -i '/^\/kevlike\/models\//d; /^\/docs\/results\//d; /^\/tests\//d' .git/info/exclude
case "${1:-}" in
  c1) git rm -r --cached -q kevlike/models docs/results
      printf '/kevlike/models/\n/docs/results/\n' >> .git/info/exclude ;;
  c2) git rm -r --cached -q kevlike/models/qwen docs/results tests
      printf '/kevlike/models/qwen/\n/docs/results/\n/tests/\n' >> .git/info/exclude ;;
  restore) ;;
  *) echo "usage: trim.sh c1|c2|restore" >&2; exit 2 ;;
esac
echo "bytes that travel: $( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)"
