#!/usr/bin/env bash
# Makes `docker compose up` / `docker-compose up` (no service names) work where no container registry answers.
# docker-compose.yml names the public Prometheus and Grafana images; for each one, from the repository root:
#   1. present locally, or `docker pull` answers within PYRMQ_PULL_TIMEOUT seconds (default 30; 0 skips the pull;
#      a registry that answered is waited for until the pull ends): nothing to do;
#   2. Prometheus otherwise: build pyrmq-prometheus:$PYRMQ_TAG from Debian's package (Dockerfile.prometheus) on
#      $PYRMQ_BASE_IMAGE (required) and point the prometheus service at it;
#   3. Grafana otherwise (Debian has no package): put the grafana service in the profile "grafana", so `up`
#      starts everything else.
# Steps 2 and 3 go into docker-compose.override.yml, which both compose tools read next to docker-compose.yml
# when no -f is given. Written only when needed, removed when both images are available again, and never
# touched when it does not start with this script's marker line (it is then yours: the lines are printed instead).
# Prints what it decided on stderr and the override's path (or nothing) on stdout.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
log() { printf 'monitoring: %s\n' "$*" >&2; }

COMPOSE_FILE=docker-compose.yml
OVERRIDE=docker-compose.override.yml
MARKER="# Written by deploy/images/monitoring.sh"
PULL_TIMEOUT="${PYRMQ_PULL_TIMEOUT:-30}"
TAG="${PYRMQ_TAG:-latest}"

# The image a service of the compose file names (its first `image:` line after `  <service>:`).
compose_image() {
    awk -v svc="  $1:" '$0 == svc { found = 1; next } found && /^    image:/ { print $2; exit }' "$COMPOSE_FILE"
}

# 0 when the image is here or a registry served it.
available() {
    local image="$1" out pid waited=0
    docker image inspect "$image" >/dev/null 2>&1 && { log "$image: present locally"; return 0; }
    [[ "$PULL_TIMEOUT" == 0 ]] && { log "$image: not here (PYRMQ_PULL_TIMEOUT=0: not pulling)"; return 1; }
    out="$(mktemp)"
    docker pull "$image" >"$out" 2>&1 &
    pid=$!
    # "Pulling from" / "Digest:" mean a registry answered: from then on wait for the pull however long it takes.
    while kill -0 "$pid" 2>/dev/null && ((waited < PULL_TIMEOUT * 10)) && ! grep -q 'Pulling from\|Digest:' "$out"; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null && ! grep -q 'Pulling from\|Digest:' "$out"; then
        kill "$pid" 2>/dev/null || true
    fi
    if wait "$pid"; then
        log "$image: pulled"
        rm -f "$out"
        return 0
    fi
    log "$image: no registry answered ($(tail -n1 "$out"))"
    rm -f "$out"
    return 1
}

PROMETHEUS="$(compose_image prometheus)"
GRAFANA="$(compose_image grafana)"
[[ -n "$PROMETHEUS" && -n "$GRAFANA" ]] || { log "error: no prometheus/grafana image in $COMPOSE_FILE"; exit 1; }

BODY=""
if ! available "$PROMETHEUS"; then
    [[ -n "${PYRMQ_BASE_IMAGE:-}" ]] || { log "error: PYRMQ_BASE_IMAGE is not set (deploy/images/build.sh sets it)"; exit 1; }
    log "building pyrmq-prometheus:$TAG from Debian's prometheus package on $PYRMQ_BASE_IMAGE"
    docker build -q -f deploy/images/Dockerfile.prometheus --build-arg BASE_IMAGE="$PYRMQ_BASE_IMAGE" \
        -t "pyrmq-prometheus:$TAG" . >&2
    BODY+="  prometheus:
    # $PROMETHEUS could not be pulled: Debian's prometheus package, same command, config and volume.
    image: pyrmq-prometheus:$TAG
    build:
      context: .
      dockerfile: deploy/images/Dockerfile.prometheus
      args:
        BASE_IMAGE: $PYRMQ_BASE_IMAGE
"
fi
if ! available "$GRAFANA"; then
    BODY+="  grafana:
    # $GRAFANA could not be pulled and Debian has no package: started only with --profile grafana.
    profiles: [grafana]
"
fi

if [[ -f "$OVERRIDE" ]] && ! head -n1 "$OVERRIDE" | grep -qF "$MARKER"; then
    if [[ -n "$BODY" ]]; then
        log "warning: $OVERRIDE is not this script's: not changing it. Add under its services: key:"
        printf '%s' "$BODY" >&2
    fi
    exit 0
fi
if [[ -z "$BODY" ]]; then
    [[ -f "$OVERRIDE" ]] && { rm -f "$OVERRIDE"; log "both images available: removed $OVERRIDE"; }
    exit 0
fi
{
    echo "$MARKER for this host ($(date -u +%Y-%m-%dT%H:%MZ)); rerun it after a registry answers."
    echo "# docker compose / docker-compose read this file next to docker-compose.yml when no -f is given."
    echo "services:"
    printf '%s' "$BODY"
} >"$OVERRIDE.tmp"
mv "$OVERRIDE.tmp" "$OVERRIDE"
log "wrote $OVERRIDE"
echo "$OVERRIDE"
