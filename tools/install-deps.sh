#!/usr/bin/env bash
# Installs the Debian packages listed in cmake/dependencies.txt that are not installed yet. Run by `make deps` (and
# so by `make test`) from one process at a time. Silent and near-instant when nothing is missing; as root it installs
# the missing packages, running `apt-get update` only when the package lists are empty or the install fails; as any
# other user it prints the one command to run and exits 1. Safe to run again and again.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
list="$root/cmake/dependencies.txt"

# Package names, without comments and blank lines.
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$')

# dpkg-query prints a line for every package it knows (any state) and stays silent about the others.
declare -A installed=()
while read -r name state; do
    [[ "$state" == installed ]] && installed["$name"]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${wanted[@]}" 2>/dev/null || true)

missing=()
for name in "${wanted[@]}"; do
    [[ -n "${installed[$name]:-}" ]] || missing+=("$name")
done
((${#missing[@]} == 0)) && exit 0

if ((EUID != 0)); then
    echo "memscope: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "memscope: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -q --no-install-recommends "${missing[@]}"; }
if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null && install; then
    exit 0
fi
# Fresh machines have no package lists, and old lists name package versions the mirror no longer has.
apt-get update -q
install
