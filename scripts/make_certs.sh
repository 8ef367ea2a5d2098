#!/usr/bin/env bash
# A test CA and PEM certificates for local TLS listeners (never for production):
#
#   scripts/make_certs.sh [DIR]        (default ./certs; `make certs` runs it)
#
# writes, in DIR:
#   ca.pem, ca.key              the test CA (what ssl.truststore.location points at)
#   broker.pem                  key + certificate chain of the brokers (ssl.keystore.location),
#                               for localhost, 127.0.0.1, ::1 and any name in $CERT_HOSTS
#   broker.key, broker.crt      the same key and certificate apart (ssl.keystore.key/.certificate.chain)
#   client.pem, client.key, client.crt
#                               a client certificate for mutual TLS, subject CN=alice,OU=eng,O=minibroker
#   rogue-ca.pem, rogue.pem     a second CA and a client certificate it signed: not trusted by
#                               the brokers, for checking that mTLS refuses it
# Keys are unencrypted: it is test material. Existing files are replaced.
set -euo pipefail
dir=${1:-certs}
days=${CERT_DAYS:-825}
mkdir -p "$dir"
cd "$dir"
umask 077

sans="DNS:localhost,IP:127.0.0.1,IP:::1"
for h in ${CERT_HOSTS:-}; do sans="$sans,DNS:$h"; done

ca() {  # name subject
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days "$days" \
        -subj "$2" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

leaf() {  # name subject ca extensions
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    printf '%s\n' "$4" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
        -out "$1.crt" -days "$days" -extfile "$1.ext" 2>/dev/null
    cat "$1.key" "$1.crt" > "$1.pem"
    rm -f "$1.csr" "$1.ext"
}

ca ca "/CN=minibroker test CA/O=minibroker"
leaf broker "/CN=localhost/O=minibroker" ca \
    "subjectAltName=$sans
extendedKeyUsage=serverAuth,clientAuth"
leaf client "/O=minibroker/OU=eng/CN=alice" ca "extendedKeyUsage=clientAuth"
ca rogue-ca "/CN=rogue CA"
leaf rogue "/CN=mallory" rogue-ca "extendedKeyUsage=clientAuth"
rm -f ./*.srl
chmod 644 ./*.pem ./*.crt
echo "wrote $(pwd): ca.pem broker.pem client.pem rogue.pem (and their keys)"
