#!/usr/bin/env bash
# Builds the pyrmq images named in docker-compose.yml (pyrmq-namesrv, pyrmq-broker) from the repository root:
#   1. deploy/images/base/build-base.sh finds or builds a base image (unless PYRMQ_BASE_IMAGE is set);
#   2. `docker compose build` (plugin) or `docker-compose build` (standalone) builds one service per image:
#      every broker service shares the pyrmq-broker image, so building broker-a builds it for all four.
#      Without any compose tool, plain `docker build` with the same tags.
#   3. deploy/images/monitoring.sh: Prometheus and Grafana pulled, or where no registry answers a Prometheus image
#      from Debian's package and docker-compose.override.yml (so plain `docker compose up` starts all but Grafana).
#   4. the images only docker-compose.controller.yml names: pyrmq-etcd (Debian's etcd-server package) and
#      pyrmq-prometheus (Debian's prometheus package; a cache hit when step 3 built it), on the same base.
# Extra arguments go to the build command (e.g. --no-cache). Prints what it did and how long it took.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
log() { printf 'images: %s\n' "$*" >&2; }
START=$SECONDS

if [[ -z "${PYRMQ_BASE_IMAGE:-}" ]]; then
    PYRMQ_BASE_IMAGE="$(deploy/images/base/build-base.sh)"
fi
export PYRMQ_BASE_IMAGE
log "base image $PYRMQ_BASE_IMAGE ($((SECONDS - START))s)"

if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    COMPOSE=()
fi

if ((${#COMPOSE[@]})); then
    log "building with ${COMPOSE[*]}"
    "${COMPOSE[@]}" -f docker-compose.yml build "$@" namesrv broker-a
else
    TAG="${PYRMQ_TAG:-latest}"
    log "no compose tool: building with docker build"
    for kind in namesrv broker; do
        docker build "$@" -f "deploy/images/Dockerfile.$kind" --build-arg BASE_IMAGE="$PYRMQ_BASE_IMAGE" \
            -t "pyrmq-$kind:$TAG" .
    done
fi
log "built pyrmq-namesrv and pyrmq-broker in $((SECONDS - START))s"
deploy/images/monitoring.sh >/dev/null
if ((${#COMPOSE[@]})); then
    "${COMPOSE[@]}" -f docker-compose.controller.yml build "$@" etcd-1 prometheus
else
    TAG="${PYRMQ_TAG:-latest}"
    for kind in etcd prometheus; do
        docker build "$@" -f "deploy/images/Dockerfile.$kind" --build-arg BASE_IMAGE="$PYRMQ_BASE_IMAGE" \
            -t "pyrmq-$kind:$TAG" .
    done
fi
log "built pyrmq-etcd and pyrmq-prometheus (docker-compose.controller.yml) in $((SECONDS - START))s"
log "done in $((SECONDS - START))s"
