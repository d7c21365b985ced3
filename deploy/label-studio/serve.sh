#!/usr/bin/env bash
# Start Label Studio headless on 127.0.0.1 with a SQLite database, an admin user and a known API token.
#   bash deploy/label-studio/serve.sh [VENV_DIR] [DATA_DIR] [PORT]
# The token is read from LABEL_STUDIO_USER_TOKEN (default: a development token; never use it on a
# shared machine). certsel reads it from the environment variable a job names, never from the job file.
set -euo pipefail
VENV=${1:-.venv-label-studio}
DATA=${2:-.label-studio}
PORT=${3:-8080}
mkdir -p "$DATA"
export LABEL_STUDIO_BASE_DATA_DIR="$DATA"                   # SQLite: $DATA/label_studio.sqlite3
export LABEL_STUDIO_USERNAME=${LABEL_STUDIO_USERNAME:-admin@certsel.local}
export LABEL_STUDIO_PASSWORD=${LABEL_STUDIO_PASSWORD:-certsel-admin}
export LABEL_STUDIO_USER_TOKEN=${LABEL_STUDIO_USER_TOKEN:-certsel-development-token-0123456789}
# "Authorization: Token ..." (legacy tokens) is off for a new organization since 1.20; certsel uses it
export LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true
# webhooks to a certsel on this machine (127.0.0.1) are refused while SSRF protection is on
export LABEL_STUDIO_SSRF_PROTECTION_ENABLED=false
# no sign-up without an invitation, no calls out (version check, analytics, error reporting)
export LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK=true
export LABEL_STUDIO_LATEST_VERSION_CHECK=false
export LABEL_STUDIO_COLLECT_ANALYTICS=false
export LABEL_STUDIO_SENTRY_DSN= LABEL_STUDIO_FRONTEND_SENTRY_DSN=
exec "$VENV/bin/label-studio" start --no-browser --internal-host 127.0.0.1 -p "$PORT"
