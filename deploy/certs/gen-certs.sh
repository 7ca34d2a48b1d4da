#!/bin/sh
# Generate a throwaway CA and one certificate per service for a TLS cluster (mqctl dev up --secure, the compose
# override docker-compose.secure.yml). Nothing here is committed: every run makes new keys.
#
#   gen-certs.sh OUT_DIR SERVICE [SERVICE ...]
#
# OUT_DIR gets ca.pem (the CA certificate clients trust), and for each SERVICE <service>.pem (its certificate,
# signed by the CA, naming SERVICE, localhost and 127.0.0.1 as subjectAltNames, usable by servers and clients, so
# a broker presents the same one to the nameserver as its client certificate) and <service>.key (its private key,
# mode 0600). The CA's key is deleted at the end: no one can sign more certificates for this cluster.
# EXTRA_SANS (space-separated DNS names or IPs) are added to every certificate (a host address clients dial).
# For tests of bad certificates: SERVICE_DAYS (default CERT_DAYS) is the services' validity (-1: expired a day
# ago), and LOCAL_SANS=no leaves localhost and 127.0.0.1 out (a certificate that names only SERVICE).
set -eu
out=$1; shift
[ "$#" -gt 0 ] || { echo "usage: gen-certs.sh OUT_DIR SERVICE [SERVICE ...]" >&2; exit 2; }
command -v openssl >/dev/null || { echo "gen-certs.sh: openssl is missing (apt-get install openssl)" >&2; exit 3; }
days=${CERT_DAYS:-30}
umask 077
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=pyrmq test CA" -keyout "$work/ca.key" -out "$out/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
for svc in "$@"; do
    sans="DNS:$svc"
    [ "${LOCAL_SANS:-yes}" = no ] || sans="$sans,DNS:localhost,IP:127.0.0.1"
    for extra in ${EXTRA_SANS:-}; do
        case $extra in
            *[!0-9.]*) sans="$sans,DNS:$extra" ;;
            *) sans="$sans,IP:$extra" ;;
        esac
    done
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$svc" \
        -keyout "$out/$svc.key" -out "$work/$svc.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' "$sans" \
        > "$work/$svc.ext"
    openssl x509 -req -in "$work/$svc.csr" -CA "$out/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -CAserial "$work/ca.srl" \
        -days "${SERVICE_DAYS:-$days}" -extfile "$work/$svc.ext" -out "$out/$svc.pem" 2>/dev/null
done
chmod 755 "$out"; chmod 644 "$out"/*.pem
echo "gen-certs.sh: CA and certificates for: $* in $out"
