#!/usr/bin/env bash
# Install Debian's Nsight Systems CLI (non-free, 2022.4.x) into a gitignored folder, leaving the system as it was.
#
#   tests/ingest/setup_nsys.sh [DEST]      (default DEST: .venv/nsys; prints the nsys path on success)
#
# The non-free component is named only in a private apt configuration in a temporary folder (its own
# sources list, package lists and cache); the system's sources, lists and dpkg database are not touched.
# The .debs are unpacked with dpkg-deb -x (nothing is installed). Idempotent: a finished DEST is reused.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=${1:-$ROOT/.venv/nsys}
PACKAGES=(nsight-systems nsight-systems-target libssh-4)
MIRROR=${TAXBREAK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${TAXBREAK_DEBIAN_SUITE:-bookworm}

find_nsys() { find "$1" -path '*/bin/nsys' \( -type f -o -type l \) 2>/dev/null | sort | head -n 1; }

# One set-up at a time: two test modules call this, and the parallel workers of `make test` (pytest-xdist) may
# start both at once on a fresh machine; the second waits, then finds DEST finished.
mkdir -p "$(dirname "$DEST")"
if command -v flock >/dev/null; then exec 9>"$DEST.lock"; flock 9; fi

if [[ -f "$DEST/.complete" ]]; then
    nsys=$(find_nsys "$DEST")
    [[ -n "$nsys" ]] && { echo "$nsys"; exit 0; }
fi
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "setup_nsys: $tool not found (needs a Debian-like system)" >&2; exit 2; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/taxbreak-nsys.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/lists/partial" "$TMP/cache/archives/partial" "$TMP/parts" "$TMP/debs" "$TMP/root"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
SIGNED=""
[[ -f "$KEYRING" ]] && SIGNED="[signed-by=$KEYRING] "
echo "deb ${SIGNED}$MIRROR $SUITE main non-free" > "$TMP/sources.list"
APT=(-o "Dir::Etc::SourceList=$TMP/sources.list" -o "Dir::Etc::SourceParts=$TMP/parts"
     -o "Dir::State::Lists=$TMP/lists" -o "Dir::Cache=$TMP/cache" -o "Debug::NoLocking=1"
     -o "Acquire::Retries=1" -o "Acquire::http::Timeout=20" -o "APT::Sandbox::User=root")
apt-get "${APT[@]}" -qq update >&2 || { echo "setup_nsys: apt-get update of $MIRROR $SUITE non-free failed" >&2; exit 3; }
(cd "$TMP/debs" && apt-get "${APT[@]}" -qq download "${PACKAGES[@]}" >&2) \
    || { echo "setup_nsys: apt-get download ${PACKAGES[*]} failed" >&2; exit 4; }
for deb in "$TMP"/debs/*.deb; do dpkg-deb -x "$deb" "$TMP/root"; done
(cd "$TMP/debs" && ls -1 ./*.deb) > "$TMP/root/.packages"
nsys=$(find_nsys "$TMP/root")
[[ -n "$nsys" ]] || { echo "setup_nsys: no bin/nsys in ${PACKAGES[*]}" >&2; exit 5; }
# nsys looks for host-linux-x64 (QdstrmImporter) beside its real target-linux-x64 folder; Debian's package
# puts it under /usr/lib/nsight-systems (without it: "The importer binary and its dependencies were not found").
TARGET_PARENT="$TMP/root/usr/lib/x86_64-linux-gnu/nsight-systems"
if [[ -d "$TMP/root/usr/lib/nsight-systems/host-linux-x64" && -d "$TARGET_PARENT" && ! -e "$TARGET_PARENT/host-linux-x64" ]]; then
    ln -s ../../nsight-systems/host-linux-x64 "$TARGET_PARENT/host-linux-x64"
fi
touch "$TMP/root/.complete"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.old"
[[ -e "$DEST" ]] && mv "$DEST" "$DEST.old"
mv "$TMP/root" "$DEST"
rm -rf "$DEST.old"
find_nsys "$DEST"
