#!/bin/sh
# One-shot setup of the secure compose cluster (docker-compose.secure.yml), run by its `certs` service as uid 3000
# on the named volume `tls`; nothing it makes is committed, and a second run keeps what the first made.
#
#   init-secure.sh OUT_DIR CONF_DIR SERVICE [SERVICE ...]
#
# OUT_DIR gets: the CA and each SERVICE's certificate and key (gen-certs.sh); admin-secret, the password of the ACL's
# first Super user `admin` (for mqctl: MQCTL_ACCESS_KEY=admin MQCTL_SECRET_KEY=<it>); inner-credentials, the
# access key and secret key (two lines) brokers sign their own calls with, which the healthcheck uses too; and
# conf/<SERVICE>.conf, CONF_DIR/<SERVICE>.conf plus the TLS (enforcing, on every port) and ACL keys. Secrets are
# mode 0600 for uid 3000, the only user of the images.
set -eu
out=$1; conf_dir=$2; shift 2
here=$(dirname "$0")
umask 077
if [ ! -f "$out/ca.pem" ]; then
    sh "$here/gen-certs.sh" "$out" "$@"
fi
[ -f "$out/admin-secret" ] || openssl rand -hex 24 > "$out/admin-secret"
[ -f "$out/inner-credentials" ] || printf 'inner\n%s\n' "$(openssl rand -hex 24)" > "$out/inner-credentials"
admin=$(cat "$out/admin-secret")
inner=$(sed -n 2p "$out/inner-credentials")
mkdir -p "$out/conf"
for svc in "$@"; do
    {
        cat "$conf_dir/$svc.conf"
        echo "# added by deploy/certs/init-secure.sh: TLS enforcing on every port, ACL 2.0 on"
        echo "tls.server.mode=enforcing"
        echo "tls.server.certPath=$out/$svc.pem"
        echo "tls.server.keyPath=$out/$svc.key"
        echo "tls.server.trustCertPath=$out/ca.pem"
        echo "authenticationEnabled=true"
        echo "authorizationEnabled=true"
        echo "initAuthenticationUser={\"username\":\"admin\",\"password\":\"$admin\"}"
        echo "innerClientAuthenticationCredentials={\"accessKey\":\"inner\",\"secretKey\":\"$inner\"}"
        case $svc in
            namesrv*) ;;
            *)
                echo "tls.enable=true"
                echo "tls.client.trustCertPath=$out/ca.pem"
                echo "tls.client.certPath=$out/$svc.pem"
                echo "tls.client.keyPath=$out/$svc.key"
                ;;
        esac
    } > "$out/conf/$svc.conf"
done
echo "init-secure.sh: TLS and ACL configuration for $* in $out"
