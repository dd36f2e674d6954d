#!/usr/bin/env bash
# Sourced by tests/run.sh: finds, or installs, what the remote-store tests
# start on loopback (store/tests/support/servers.rs): PostgreSQL's server
# binaries from Debian (a throwaway cluster per test run, as the postgres
# user) and moto's S3 server from PyPI in a virtualenv under target/.
# Exports SESSCTL_PG_BIN and SESSCTL_MOTO_SERVER unless already set. The
# tests fail, never skip, when these are missing (SESSCTL_REMOTE_TESTS=skip
# opts out).

if [ "${SESSCTL_REMOTE_TESTS:-}" = skip ]; then
  return 0
fi

if [ -z "${SESSCTL_PG_BIN:-}" ]; then
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
      echo "tests/run.sh: PostgreSQL's server binaries are missing: apt-get install postgresql (as root), set SESSCTL_PG_BIN=DIR, or SESSCTL_REMOTE_TESTS=skip" >&2
    fi
  fi
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    SESSCTL_PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    export SESSCTL_PG_BIN
  fi
fi

if [ -z "${SESSCTL_MOTO_SERVER:-}" ]; then
  moto_venv=$PWD/target/remote-venv
  if [ ! -x "$moto_venv/bin/moto_server" ]; then
    python3 -m venv "$moto_venv" 2>/dev/null || {
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$moto_venv"
      fi
    }
    if [ -x "$moto_venv/bin/pip" ]; then
      "$moto_venv/bin/pip" install -q --disable-pip-version-check 'moto[server]>=5.1,<6'
    fi
  fi
  if [ -x "$moto_venv/bin/moto_server" ]; then
    export SESSCTL_MOTO_SERVER=$moto_venv/bin/moto_server
  else
    echo "tests/run.sh: moto_server could not be installed into $moto_venv: set SESSCTL_MOTO_SERVER=PATH, or SESSCTL_REMOTE_TESTS=skip" >&2
  fi
fi
