#!/bin/sh
# What the postgres image's entrypoint does, for Debian's PostgreSQL on the offline base image
# (scripts/compose-check): create the cluster on the volume on first start, run the same
# /docker-entrypoint-initdb.d scripts, then run the server as the compose file's command says.
set -eu
bin=/usr/lib/postgresql/15/bin
data=/var/lib/postgresql/data
mkdir -p "$data" /run/postgresql
chown postgres:postgres "$data" /run/postgresql
chmod 700 "$data"
if [ ! -s "$data/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    runuser -u postgres -- "$bin/initdb" -D "$data" -U "$POSTGRES_USER" \
        --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f /tmp/pwfile
    echo "listen_addresses = '*'" >> "$data/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$data/pg_hba.conf"
    runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w -o "-c listen_addresses=''" start >/dev/null
    for script in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$script" ] && runuser -u postgres -- env POSTGRES_USER="$POSTGRES_USER" \
            POSTGRES_PASSWORD="$POSTGRES_PASSWORD" sh "$script"
    done
    runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w -m fast stop >/dev/null
fi
[ "${1:-}" = postgres ] && shift
exec runuser -u postgres -- "$bin/postgres" -D "$data" "$@"
