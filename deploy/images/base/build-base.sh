#!/usr/bin/env bash
# Makes sure a base image for deploy/images/Dockerfile.* exists and prints its name on the last line of stdout
# (progress goes to stderr, so `BASE=$(deploy/images/base/build-base.sh)` works).
#
# Order, first hit wins:
#   1. the requested image (BASE_IMAGE, default python:3.11-slim-bookworm) is already present locally;
#   2. `docker pull` of it answers within PYRMQ_PULL_TIMEOUT seconds;
#   3. the fallback image (PYRMQ_FALLBACK_IMAGE, default pyrmq-base:bookworm) is already present locally;
#   4. build the fallback: debootstrap a minimal Debian bookworm (python3, python3-venv, ca-certificates) from the
#      apt mirror this host is configured with, then `docker import` it.
#
# Environment:
#   BASE_IMAGE             image to look for / pull (default python:3.11-slim-bookworm)
#   PYRMQ_FALLBACK_IMAGE   tag of the image built here (default pyrmq-base:bookworm)
#   PYRMQ_PULL_TIMEOUT     seconds to wait for a registry (default 30; 0 skips the pull)
#   PYRMQ_BASE_REBUILD=1   rebuild the fallback even if it exists (and skip steps 1-3)
#   PYRMQ_APT_MIRROR       Debian mirror URI to debootstrap from (default: read from this host's apt sources)
#   PYRMQ_APT_SECURITY     Debian security mirror URI (default: read from this host's apt sources; may be empty)
#   PYRMQ_HOST_CAS=0       do not copy this host's extra CA certificates (/usr/local/share/ca-certificates)
#                          into the fallback image (they are copied by default so that pip inside `docker build`
#                          works behind the same TLS-intercepting proxy as the host)
#   PYRMQ_CACHE_DIR        where debootstrap keeps downloaded .debs (default ~/.cache/pyrmq/debootstrap)
#   BASE_IMAGE_FILE        also write the chosen image name to this file
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-${1:-python:3.11-slim-bookworm}}"
FALLBACK="${PYRMQ_FALLBACK_IMAGE:-pyrmq-base:bookworm}"
PULL_TIMEOUT="${PYRMQ_PULL_TIMEOUT:-30}"
SUITE=bookworm
CACHE_DIR="${PYRMQ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pyrmq/debootstrap}"

log() { printf 'build-base: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

choose() {
    log "using $1 ($2)"
    if [[ -n "${BASE_IMAGE_FILE:-}" ]]; then printf '%s\n' "$1" >"$BASE_IMAGE_FILE"; fi
    printf '%s\n' "$1"
    exit 0
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine reachable (is the daemon running, may this user use it?)"

if [[ "${PYRMQ_BASE_REBUILD:-0}" != 1 ]]; then
    if have_image "$BASE_IMAGE"; then choose "$BASE_IMAGE" "path: present locally"; fi
    if [[ "$BASE_IMAGE" != "$FALLBACK" && "$PULL_TIMEOUT" != 0 ]]; then
        log "pulling $BASE_IMAGE (timeout ${PULL_TIMEOUT}s)"
        if timeout "$PULL_TIMEOUT" docker pull -q "$BASE_IMAGE" >&2; then
            choose "$BASE_IMAGE" "path: pulled"
        fi
        log "no registry answered for $BASE_IMAGE"
    fi
    if have_image "$FALLBACK"; then choose "$FALLBACK" "path: reused the base built here earlier"; fi
fi

# --- build the fallback --------------------------------------------------------------------------------------
[[ $EUID -eq 0 ]] || die "building the fallback base needs root (debootstrap); run as root or with sudo"

# Prints "TYPE URI SUITE SIGNED-BY" for every enabled entry of this host's apt sources, in both formats.
apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r "$f" ]] || continue
        awk '
            { sub(/#.*/, "") }
            $1 == "deb" {
                signed = "-"; i = 2
                if ($2 ~ /^\[/) {                       # [opt=val opt=val]
                    while (i <= NF) {
                        o = $i; gsub(/[\[\]]/, "", o)
                        if (o ~ /^signed-by=/) { signed = substr(o, 11) }
                        if ($i ~ /\]$/) { i++; break }
                        i++
                    }
                }
                if (i + 1 <= NF) print "deb", $i, $(i + 1), signed
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r "$f" ]] || continue
        awk '
            function flush(   u, s, nu, ns, a, b, j, k) {
                if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false|0)$/) {
                    nu = split(uris, a, " "); ns = split(suites, b, " ")
                    for (j = 1; j <= nu; j++) for (k = 1; k <= ns; k++) print "deb", a[j], b[k], (signed == "" ? "-" : signed)
                }
                types = uris = suites = signed = enabled = ""; last = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]/   { next }                           # continuation lines (inline keys): not needed here
            {
                key = tolower($0); sub(/:.*/, "", key)
                val = $0; sub(/^[^:]*:[ \t]*/, "", val); gsub(/[ \t]+/, " ", val); sub(/ $/, "", val)
                if (key == "types") types = val
                else if (key == "uris") uris = val
                else if (key == "suites") suites = val
                else if (key == "signed-by") signed = val
                else if (key == "enabled") enabled = tolower(val)
            }
            END { flush() }' "$f"
    done
}

ENTRIES="$(apt_entries || true)"
KNOWN_SUITES='^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldstable|stable|testing|unstable)$'
MIRROR="${PYRMQ_APT_MIRROR:-}"
KEYRING=""
if [[ -z "$MIRROR" ]]; then
    # The entry for bookworm itself, else any Debian release entry (its URI serves bookworm too).
    read -r _ MIRROR _ KEYRING < <(awk -v s="$SUITE" '$3 == s' <<<"$ENTRIES" | head -n1) || true
    if [[ -z "$MIRROR" ]]; then
        read -r _ MIRROR _ KEYRING < <(awk -v re="$KNOWN_SUITES" '$3 ~ re' <<<"$ENTRIES" | head -n1) || true
    fi
fi
[[ -n "$MIRROR" ]] || die "no Debian mirror found in /etc/apt/sources.list{,.d}; set PYRMQ_APT_MIRROR=<uri>"
SECURITY="${PYRMQ_APT_SECURITY-$(awk -v s="$SUITE-security" '$3 == s { print $2; exit }' <<<"$ENTRIES")}"
[[ "$KEYRING" == "-" || ! -f "$KEYRING" ]] && KEYRING=""
[[ -z "$KEYRING" && -f /usr/share/keyrings/debian-archive-keyring.gpg ]] && KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
log "no usable registry image: building $FALLBACK with debootstrap from this host's apt mirror"

if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
fi
if [[ -z "$KEYRING" ]]; then
    log "installing debian-archive-keyring"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >&2
    KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
fi

WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/pyrmq-base.XXXXXX")"
ROOT="$WORK/root"
cleanup() {
    mountpoint -q "$ROOT/proc" 2>/dev/null && umount "$ROOT/proc" || true
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
mkdir -p "$ROOT" "$CACHE_DIR"

START=$SECONDS
log "debootstrap $SUITE (minbase) into $ROOT"
debootstrap --variant=minbase --keyring="$KEYRING" --cache-dir="$CACHE_DIR" \
    --include=ca-certificates,netbase,python3,python3-venv \
    "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
        tail -n 30 "$WORK/debootstrap.log" >&2
        die "debootstrap failed (log above)"
    }
log "debootstrap done in $((SECONDS - START))s"

# Security and point-release updates, as the public image has them.
{
    echo "deb $MIRROR $SUITE main"
    echo "deb $MIRROR $SUITE-updates main"
    [[ -n "$SECURITY" ]] && echo "deb $SECURITY $SUITE-security main"
} >"$ROOT/etc/apt/sources.list"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$ROOT/proc"
VALID_UNTIL="$(apt-config dump Acquire::Check-Valid-Until 2>/dev/null | sed -n 's/^Acquire::Check-Valid-Until "\(.*\)";$/\1/p')"
APT_OPTS=(-o "Acquire::Check-Valid-Until=${VALID_UNTIL:-true}" -o Dpkg::Use-Pty=0)
if chroot "$ROOT" apt-get "${APT_OPTS[@]}" update -qq >"$WORK/upgrade.log" 2>&1 \
    && DEBIAN_FRONTEND=noninteractive chroot "$ROOT" apt-get "${APT_OPTS[@]}" -y -qq upgrade >>"$WORK/upgrade.log" 2>&1; then
    log "applied $SUITE-updates/-security ($(grep -c '^Setting up' "$WORK/upgrade.log" || true) packages updated)"
else
    tail -n 20 "$WORK/upgrade.log" >&2
    log "warning: could not apply updates (log above); the base has the $SUITE release packages only"
fi

if [[ "${PYRMQ_HOST_CAS:-1}" != 0 ]] && compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    log "adding this host's extra CA certificates (PYRMQ_HOST_CAS=0 to skip)"
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
fi

umount "$ROOT/proc"
# Slim it down like the public slim images: no docs, man pages, translations, apt lists or caches.
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
    "$ROOT"/usr/share/locale/* "$ROOT"/var/cache/debconf/*-old "$ROOT"/etc/resolv.conf "$ROOT"/dev/*
find "$ROOT/usr/lib/python3"* -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
: >"$ROOT/etc/hostname"

log "importing $FALLBACK"
PY_VERSION="$(chroot "$ROOT" python3 -c 'import platform; print(platform.python_version())')"
tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change "ENV PYTHON_VERSION=$PY_VERSION" \
    --change 'LABEL org.opencontainers.image.title=pyrmq-base org.opencontainers.image.description="Debian bookworm minbase with python3 and python3-venv, built by deploy/images/base/build-base.sh"' \
    --change 'CMD ["python3"]' \
    -m "pyrmq base: debootstrap $SUITE minbase + python3 $PY_VERSION" \
    - "$FALLBACK" >&2
log "built $FALLBACK in $((SECONDS - START))s ($(docker image inspect -f '{{.Size}}' "$FALLBACK" | awk '{printf "%.0f MB", $1/1e6}'))"
choose "$FALLBACK" "path: built here with debootstrap"
