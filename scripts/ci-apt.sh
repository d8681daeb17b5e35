#!/usr/bin/env bash
# Install, in one apt-get step, the packages of scripts/ci-packages.txt that this machine
# lacks (a package counts as present when its command or file, second column, is there).
# Prints one line: what it installed, or that nothing was missing. Needs root (or sudo -n)
# only when something is missing.
set -euo pipefail
LIST="${ENVFORGE_CI_PACKAGES:-$(dirname "$0")/ci-packages.txt}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

present() {  # present COMMAND-OR-PATH
    case "$1" in
        /*) [ -e "$1" ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

missing=()
while read -r pkg probe _; do
    case "$pkg" in ''|'#'*) continue ;; esac
    present "${probe:-$pkg}" || missing+=("$pkg")
done <"$LIST"

if [ "${#missing[@]}" -eq 0 ]; then
    echo "ci-apt: every package of $(basename "$LIST") is present"
    exit 0
fi
echo "ci-apt: installing ${missing[*]}"
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
