# shellcheck shell=bash
# Sourced by the tests of tests/varlink that build against the reference Go varlink library as
# Debian packages it (golang-github-varlink-go-dev under /usr/share/gocode: GOPATH mode, offline).
# It makes the scratch directory $tmp and, at exit, stops the background process whose id the test
# put into $pid and removes $tmp.
tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# go_reference_build WORK_DIR OUTPUT PROGRAM.go: one of the programs of tests/varlink/go, with
# their shared common.go.
go_reference_build() {
  local dir
  dir="$(dirname "${BASH_SOURCE[0]}")/go"
  go build -o "$1/$2" "$dir/$3" "$dir/common.go"
}

# go_reference_env WORK_DIR: exit 77 (skipped) when go or the library is not installed; else the
# environment of an offline GOPATH build, its cache in WORK_DIR.
go_reference_env() {
  local gocode=/usr/share/gocode
  command -v go >/dev/null || { echo "skipped: go not installed (golang-go; scripts/install-deps.sh)"; exit 77; }
  [ -d "$gocode/src/github.com/varlink/go/varlink" ] ||
    { echo "skipped: $gocode has no github.com/varlink/go (golang-github-varlink-go-dev; scripts/install-deps.sh)"; exit 77; }
  mkdir -p "$1"
  export GOPATH="$gocode" GO111MODULE=off GOFLAGS="" GOCACHE="$1/gocache" GOPROXY=off CGO_ENABLED=0
}

# wait_for_socket PATH PID LOG: until PATH is a socket (10 s); fails with LOG when it is not, or
# when PID exited first.
wait_for_socket() {
  for _ in $(seq 100); do
    [ -S "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAILED: nothing listens on $1"
  cat "$3"
  return 1
}
