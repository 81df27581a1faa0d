#!/usr/bin/env bash
# The varlink certification suite of the reference Go library (varlink-go-certification from
# golang-github-varlink-go-dev, interface org.varlink.certification), built offline from
# /usr/share/gocode, against the project's varlink library in one direction:
#   server: the reference client (--client), then go_certification_check, against
#           certification_server (the library's registry and codec in the daemon's socket loop);
#   client: certification_client (the library's codec) against the reference service.
# Exit 77 (skipped) when go or the Go library is not installed.
# Usage: certification_test.sh server|client BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
direction="$1"; bin="$2"; src="$3"; work="$4"
# shellcheck source=tests/varlink/go_reference.sh
source "$src/tests/varlink/go_reference.sh"
go_reference_env "$work"
go build -o "$work/varlink-go-certification" github.com/varlink/go/cmd/varlink-go-certification

sock="$tmp/org.varlink.certification"

case "$direction" in
server)
  go_reference_build "$work" go_certification_check certification_check.go
  "$bin" "unix:$sock" >"$tmp/server.log" 2>&1 &
  pid=$!
  wait_for_socket "$sock" "$pid" "$tmp/server.log"
  # The reference client exits 0 after a failed step too; what it printed tells.
  status=0
  "$work/varlink-go-certification" --client --varlink="unix:$sock" >"$tmp/client.out" 2>&1 || status=$?
  cat "$tmp/client.out"
  receives="$(grep -c "^  Receive: 'Reply number [0-9]*'$" "$tmp/client.out" || true)"
  if [ "$status" != 0 ] || grep -qi "failed" "$tmp/client.out" || ! grep -qx "Test11: ''" "$tmp/client.out" ||
     ! grep -qx "End: 'true'" "$tmp/client.out" || [ "$receives" != 10 ]; then
    echo "FAILED: the reference certification client did not reach End: 'true' with 10 Test10 replies"
    echo "--- certification_server log"; cat "$tmp/server.log"; exit 1
  fi
  echo "PASS: the reference certification client passed against certification_server"
  if ! "$work/go_certification_check" "unix:$sock"; then
    echo "--- certification_server log"; cat "$tmp/server.log"; exit 1
  fi
  kill -0 "$pid" || { echo "FAILED: certification_server exited during the run"; cat "$tmp/server.log"; exit 1; }
  kill -TERM "$pid"
  status=0; wait "$pid" || status=$?
  pid=""
  [ "$status" = 0 ] || { echo "FAILED: certification_server exited $status on SIGTERM"; cat "$tmp/server.log"; exit 1; }
  ;;
client)
  "$work/varlink-go-certification" --varlink="unix:$sock" >"$tmp/server.log" 2>&1 &
  pid=$!
  wait_for_socket "$sock" "$pid" "$tmp/server.log"
  if ! "$bin" "unix:$sock"; then
    echo "--- varlink-go-certification (service) log"; cat "$tmp/server.log"; exit 1
  fi
  kill -0 "$pid" || { echo "FAILED: the reference service exited during the run"; cat "$tmp/server.log"; exit 1; }
  ;;
*)
  echo "usage: certification_test.sh server|client BINARY SOURCE_DIR WORK_DIR" >&2; exit 2 ;;
esac
