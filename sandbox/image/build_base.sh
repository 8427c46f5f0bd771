#!/usr/bin/env bash
# Offline base image: a minimal Debian made with debootstrap from the apt mirror
# this host already uses, imported as revise-base:<suite>. No registry needed.
#
# The suite comes from /etc/os-release and the mirror from the apt configuration
# (sources.list, *.list, deb822 *.sources); nothing is hard-coded. Idempotent:
# does nothing when the image exists. Prints the image tag on the last line.
#
# Environment:
#   REVISE_BASE_SUITE    override the suite (default VERSION_CODENAME)
#   REVISE_BASE_MIRROR   override the mirror (default: read from apt)
#   REVISE_BASE_TAG      override the tag (default revise-base:<suite>)
set -euo pipefail

say() { printf 'build_base: %s\n' "$*" >&2; }

# shellcheck disable=SC1091
SUITE=${REVISE_BASE_SUITE:-$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")}
if [ -z "$SUITE" ]; then
    say "cannot read VERSION_CODENAME from /etc/os-release; set REVISE_BASE_SUITE"
    exit 1
fi
TAG=${REVISE_BASE_TAG:-revise-base:$SUITE}
PACKAGES=python3-minimal,libpython3.11-stdlib

if docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG exists; nothing to do"
    echo "$TAG"
    exit 0
fi

# One-line format: "deb [options] URI suite components..."
mirror_from_list() {
    awk -v suite="$SUITE" '
        $1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit }
        }' "$@" 2>/dev/null
}

# deb822 format: paragraphs with Types:, URIs:, Suites:, optional Enabled: no.
mirror_from_sources() {
    awk -v suite="$SUITE" '
        function flush() {
            if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ")) {
                split(uris, u, " "); print u[1]; found = 1
            }
            types = ""; uris = ""; suites = ""; enabled = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); if (found) exit; next }
        tolower($1) == "types:"   { sub(/^[^:]*:[ \t]*/, ""); types = $0 }
        tolower($1) == "uris:"    { sub(/^[^:]*:[ \t]*/, ""); uris = $0 }
        tolower($1) == "suites:"  { sub(/^[^:]*:[ \t]*/, ""); suites = $0 }
        tolower($1) == "enabled:" { sub(/^[^:]*:[ \t]*/, ""); enabled = tolower($0) }
        END { if (!found) flush() }' "$1" 2>/dev/null | head -n 1
}

find_mirror() {
    local file mirror
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        mirror=$(mirror_from_list "$file")
        if [ -n "$mirror" ]; then echo "$mirror"; return 0; fi
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        mirror=$(mirror_from_sources "$file")
        if [ -n "$mirror" ]; then echo "$mirror"; return 0; fi
    done
    return 1
}

MIRROR=${REVISE_BASE_MIRROR:-$(find_mirror || true)}
if [ -z "$MIRROR" ]; then
    say "no apt source for suite $SUITE in /etc/apt/sources.list{,.d/*.list,.d/*.sources};"
    say "add one or set REVISE_BASE_MIRROR"
    exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    say "debootstrap missing: installing it"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap \
        || { apt-get update && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y --no-install-recommends debootstrap; }
fi

# Two builds at once would both debootstrap; the second waits and then finds the image.
exec 9>/run/revise-build-base.lock
flock 9
if docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG appeared while waiting for the lock"
    echo "$TAG"
    exit 0
fi

WORK=$(mktemp -d /var/tmp/revise-base.XXXXXX)
trap 'rm -rf --one-file-system "$WORK"' EXIT
ROOT=$WORK/root

say "debootstrap $SUITE from $MIRROR (minbase + $PACKAGES)"
started=$SECONDS
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" \
    >"$WORK/debootstrap.log" 2>&1 || {
    say "debootstrap failed; last lines of its log:"
    tail -n 25 "$WORK/debootstrap.log" >&2
    tail -n 25 "$ROOT/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    exit 1
}
say "debootstrap done in $((SECONDS - started))s"

# The runtime needs these stdlib modules; fail here, not inside a run.
chroot "$ROOT" python3 -I -S -B -c \
    'import asyncio, contextvars, json, os, sys, threading, time, ctypes, socket' || {
    say "python3 in the new root cannot import the runtime's modules"
    exit 1
}

# Nothing in the sandbox needs package metadata caches, docs or locales.
rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/debconf/*-old \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
    "$ROOT"/usr/share/locale/* "$ROOT"/usr/share/lintian "$ROOT"/var/log/* \
    "$ROOT"/debootstrap "$ROOT"/tmp/* "$ROOT"/root/.cache
find "$ROOT"/usr/lib/python3* -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true

say "importing $TAG ($(du -sh --one-file-system "$ROOT" | cut -f1) on disk)"
tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "revise offline base: debootstrap $SUITE minbase + $PACKAGES from $MIRROR" \
    - "$TAG" >/dev/null
say "built $TAG in $((SECONDS - started))s"
echo "$TAG"
