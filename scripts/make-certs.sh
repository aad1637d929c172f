#!/usr/bin/env bash
# Makes a throw-away cluster CA and one certificate per name, for mutual TLS between
# pstrain tasks (--tls-cert, --tls-key, --tls-ca) and for tests. ECDSA P-256, PEM.
#
#   scripts/make-certs.sh [--days N] DIR [NAME ...]     (default NAME: node)
#
# Writes DIR/ca.pem and DIR/ca.key (the CA; keep ca.key off the cluster hosts), and for
# every NAME DIR/NAME.pem and DIR/NAME.key. Every certificate signed by the CA is a member
# of the cluster: peers are verified against the CA, not by host name. Keys are mode 600.
# An existing CA in DIR is reused, so more names can be added later.
set -euo pipefail
days=365
if [ "${1:-}" = "--days" ]; then days=$2; shift 2; fi
if [ $# -lt 1 ] || [ "${1:0:1}" = "-" ]; then
  echo "usage: $0 [--days N] DIR [NAME ...]" >&2
  exit 2
fi
dir=$1; shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(node)
command -v openssl >/dev/null || { echo "$0: openssl not found (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
    -subj "/CN=pstrain cluster CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
fi
ext=$(mktemp)
trap 'rm -f "$ext" "$dir"/*.csr' EXIT
for name in "${names[@]}"; do
  case $name in *[!A-Za-z0-9._-]*|"") echo "$0: bad name '$name' (letters, digits, . _ -)" >&2; exit 2;; esac
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:%s\n' \
    "$name" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
done
chmod 644 "$dir"/*.pem
echo "$dir: ca.pem ca.key $(printf '%s.pem %s.key ' $(for n in "${names[@]}"; do echo "$n $n"; done))"
