#!/bin/sh
# Writes PgBouncer's auth file from the environment, then runs PgBouncer (as the postgres user
# Debian's package creates: PgBouncer refuses to run as root).
set -eu
: "${DB_USER:?set DB_USER}" "${DB_PASSWORD:?set DB_PASSWORD}"
umask 077
printf '"%s" "%s"\n' "$DB_USER" "$DB_PASSWORD" > /etc/pgbouncer/userlist.txt
chown postgres /etc/pgbouncer/userlist.txt
exec pgbouncer -u postgres /etc/pgbouncer/pgbouncer.ini
