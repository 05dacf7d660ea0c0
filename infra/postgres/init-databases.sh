#!/bin/sh
# Creates one role and database each for Gitea, Mattermost and the hub (first start only).
set -eu
for name in gitea mattermost hub; do
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<SQL
CREATE ROLE $name LOGIN PASSWORD '$POSTGRES_PASSWORD';
CREATE DATABASE $name OWNER $name;
SQL
done
# The hub's trigram search needs pg_trgm, which only a superuser may create.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname hub -c "CREATE EXTENSION IF NOT EXISTS pg_trgm"
