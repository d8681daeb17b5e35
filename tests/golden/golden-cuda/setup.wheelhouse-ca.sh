#!/usr/bin/env bash
# envforge recipe golden-cuda (stack torch2.6.0-cu126-py3.12): create its virtualenv.
# Recipe hash sha256:8cc1882aa503b2ac25d5a3564a380e55e63b9be2ad5426fe1c82bbc3de6e1c65. Generated: do not edit.
#
# usage: setup.sh [--wheelhouse DIR] [--ca-bundle FILE] [--uv PATH | --pip] PYTHON TARGET
#   PYTHON  interpreter for the venv; must be Python 3.12 (exit 4 otherwise)
#   TARGET  directory for the venv; must be absent or empty
#   --wheelhouse DIR  install torch (and anything else found there) from DIR instead of
#                     the torch index
#   --ca-bundle FILE  CA certificates the installer must trust
#   --uv PATH / --pip force the installer (default: uv when on PATH, else pip)
# This plan was rendered for a wheelhouse: --wheelhouse is required.
# This plan was rendered for a CA bundle: --ca-bundle is required.
# Exit codes: 0 done, 2 usage, 4 wrong or missing interpreter, other: the installer failed.
set -euo pipefail

usage() {
    echo "usage: setup.sh [--wheelhouse DIR] [--ca-bundle FILE] [--uv PATH | --pip] PYTHON TARGET" >&2
    exit 2
}

wheelhouse=""
ca_bundle=""
installer="auto"
uv_bin=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --wheelhouse) [ "$#" -ge 2 ] || usage; wheelhouse=$2; shift 2 ;;
        --ca-bundle) [ "$#" -ge 2 ] || usage; ca_bundle=$2; shift 2 ;;
        --uv) [ "$#" -ge 2 ] || usage; installer="uv"; uv_bin=$2; shift 2 ;;
        --pip) installer="pip"; shift ;;
        --) shift; break ;;
        -*) echo "setup.sh: unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[ "$#" -eq 2 ] || usage
python=$1
target=$2
[ -n "$wheelhouse" ] || { echo "setup.sh: this plan needs --wheelhouse DIR" >&2; exit 2; }
[ -n "$ca_bundle" ] || { echo "setup.sh: this plan needs --ca-bundle FILE" >&2; exit 2; }
if [ -n "$wheelhouse" ] && [ ! -d "$wheelhouse" ]; then
    echo "setup.sh: --wheelhouse $wheelhouse: not a directory" >&2; exit 2
fi
if [ -n "$ca_bundle" ] && [ ! -f "$ca_bundle" ]; then
    echo "setup.sh: --ca-bundle $ca_bundle: not a file" >&2; exit 2
fi
if [ -e "$target" ] && [ -n "$(ls -A -- "$target" 2>/dev/null || echo x)" ]; then
    echo "setup.sh: $target exists and is not empty" >&2; exit 2
fi

# The interpreter must be the recipe's Python: never silently another version.
if ! found=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
    echo "setup.sh: cannot run $python; install Python 3.12 or pass its path" >&2
    exit 4
fi
if [ "$found" != "3.12" ]; then
    echo "setup.sh: $python is Python $found; recipe golden-cuda needs Python 3.12" >&2
    exit 4
fi

if [ "$installer" = "auto" ]; then
    if uv_bin=$(command -v uv); then installer="uv"; else installer="pip"; fi
fi

# Where torch comes from, and where the rest does (the default index, plus these).
if [ -n "$wheelhouse" ]; then
    torch_source=(--find-links "$wheelhouse")
    rest_source=(--find-links "$wheelhouse")
else
    torch_source=()
    rest_source=()
fi
requirements=(
    torch==2.6.0
    'numpy>=2'
    triton==3.2.0
)

if [ "$installer" = "uv" ]; then
    if [ -n "$ca_bundle" ]; then export SSL_CERT_FILE="$ca_bundle"; fi
    export UV_PYTHON_DOWNLOADS=never  # the interpreter given, never a downloaded one
    "$uv_bin" venv --quiet --python "$python" -- "$target"
    install=("$uv_bin" pip install --python "$target/bin/python" --index-strategy unsafe-best-match)
else
    "$python" -m venv -- "$target"
    install=("$target/bin/python" -m pip install --disable-pip-version-check --no-input)
    if [ -n "$ca_bundle" ]; then install+=(--cert "$ca_bundle"); fi
fi

# torch first, from its own source; then the NumPy bound and the packages, with torch
# repeated so that resolving them cannot move it.
"${install[@]}" ${torch_source[@]+"${torch_source[@]}"} -- torch==2.6.0 triton==3.2.0 'numpy>=2'
"${install[@]}" ${rest_source[@]+"${rest_source[@]}"} -- "${requirements[@]}"
