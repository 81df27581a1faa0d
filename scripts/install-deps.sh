#!/usr/bin/env bash
# Installs the Debian 12 packages haltpolld needs that are missing. Idempotent; silent when
# everything is present. Usage: scripts/install-deps.sh [--arm64] [--arm64-vm] [--extra] [--eval]
#   --arm64  also the arm64 cross toolchain, qemu-user and the :arm64 -dev libraries (multiarch)
#   --arm64-vm  --arm64, and what tests/arm64vm needs: libbpf for arm64, qemu-system-aarch64, and
#            the foreign-architecture bootstrap of the guest's root file system (arch-test, binfmt)
#   --extra  also the tools of the optional checks (clang's sanitizer runtime for fuzzing, gnuplot:
#            also for contrib/grafana/plot-panels.sh and scripts/eval-kernel.sh's plots)
#   --eval   also the real applications scripts/eval-kernel.sh loads (and its smoke test, ctest label
#            "eval"), installed with no system service started or left enabled: the script starts
#            each server itself, unprivileged, on loopback, with its own directory and port
set -euo pipefail

want_arm64=0 want_arm64_vm=0 want_extra=0 want_eval=0
for a in "$@"; do
  case "$a" in
    --arm64) want_arm64=1 ;;
    --arm64-vm) want_arm64=1 want_arm64_vm=1 ;;
    --extra) want_extra=1 ;;
    --eval) want_eval=1 ;;
    *) echo "usage: $0 [--arm64] [--arm64-vm] [--extra] [--eval]" >&2; exit 2 ;;
  esac
done

# Host build, tests and benchmarks. liburcu-dev is the baseline bench_hazard compares against;
# systemd gives systemd-analyze for the unit checks; util-linux gives setpriv for permission tests;
# spin model-checks the Parker (tests/model/parker.pml, a unit test); xz-utils unpacks the real-guest
# recordings in tests/data/real-guest.
# The eBPF kernel signals (src/bpf): clang compiles the program for -target bpf, bpftool turns it into
# a skeleton, libbpf-dev (with libelf-dev and zlib1g-dev, its link dependencies) loads it;
# linux-perf is the cross-check of tests/bpf and scripts/kernel-signals-check.sh.
# prometheus (with promtool), prometheus-node-exporter, python3 and curl run the fleet tests
# (tests/fleet, label "fleet"); mmdebstrap builds the Debian tree in which tests/systemd boots a
# real systemd (from the host's apt sources, cached).
# debhelper, dpkg-dev, fakeroot and lintian build and check the Debian packages (scripts/package.sh,
# tests/package); golang-go with golang-github-varlink-go-dev builds, offline from /usr/share/gocode,
# the reference varlink client of tests/varlink and the reference certification suite
# (varlink-go-certification), which checks the varlink library as a server and as a client.
# python3-fusepy and fuse3 serve the FUSE fake sysfs of the fault-injection campaigns (tests/faults,
# label "faults": the real daemon against a tree that slows and refuses its writes; needs root).
# The lint tests (tests/lint) run shellcheck over every shell script of the tree and pyflakes
# (python3-pyflakes) over every Python file.
pkgs=(cmake make g++ pkg-config libboost-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
      catch2 libsystemd-dev liburcu-dev systemd util-linux procps spin xz-utils
      clang libbpf-dev bpftool libelf-dev zlib1g-dev linux-perf
      prometheus prometheus-node-exporter python3 curl mmdebstrap python3-fusepy fuse3
      debhelper dpkg-dev fakeroot lintian golang-go golang-github-varlink-go-dev shellcheck
      python3-pyflakes)
if [ "$want_arm64" = 1 ]; then
  # Multiarch: the arm64 builds of the compiled libraries come from Debian's own :arm64 packages,
  # so no x86 library can end up in an arm64 link. Header-only packages (Boost, nlohmann-json,
  # CLI11, Catch2) are architecture-independent and serve both.
  pkgs+=(g++-aarch64-linux-gnu qemu-user-static libspdlog-dev:arm64 libfmt-dev:arm64
         libsystemd-dev:arm64 libboost-dev:arm64 liburcu-dev:arm64)
fi
if [ "$want_arm64_vm" = 1 ]; then
  pkgs+=(libbpf-dev:arm64 libelf-dev:arm64 zlib1g-dev:arm64 qemu-system-arm arch-test binfmt-support
         e2fsprogs file)
fi
if [ "$want_extra" = 1 ]; then
  pkgs+=(libclang-rt-14-dev gnuplot-nox)
fi
# The evaluation's real applications (scripts/eval-kernel.sh, docs/performance.md "Method"), each a
# server and its own load generator on loopback: redis-server with redis-tools (redis-benchmark,
# GET/SET with one and with eight clients: a key-value RPC of a few microseconds); nginx-light and
# wrk (keep-alive HTTP of a small file, one and sixteen connections); memcached with
# libmemcached-tools (memcslap, its load generator: memtier_benchmark is not in Debian 12); sockperf
# (UDP ping-pong, the latency of one message each way); mariadb-server (mariadbd with its own data
# directory from mariadb-install-db) and sysbench (oltp_read_only, a real database client).
eval_services=(redis-server nginx memcached mariadb)
if [ "$want_eval" = 1 ]; then
  pkgs+=(redis-server redis-tools nginx-light wrk memcached libmemcached-tools sockperf mariadb-server sysbench)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# ...and none is left enabled: the systemd units are disabled offline (systemctl --root works
# without systemd as PID 1, as in a container), the SysV links turned to K links. Run on every
# --eval, also when nothing was missing. A server of theirs found running is named, not stopped.
disable_eval_services() {
  [ "$want_eval" = 1 ] || return 0
  local s
  for s in "${eval_services[@]}"; do
    if [ -e "/lib/systemd/system/$s.service" ] && command -v systemctl >/dev/null; then
      $sudo systemctl --root=/ --quiet disable "$s.service" 2>/dev/null || true
    fi
    if [ -e "/etc/init.d/$s" ] && command -v update-rc.d >/dev/null; then
      $sudo update-rc.d "$s" disable >/dev/null 2>&1 || true
    fi
  done
  for s in redis-server nginx memcached mariadbd; do
    if pgrep -x "$s" >/dev/null; then
      echo "install-deps: note: a $s is running (not started by this script; scripts/eval-kernel.sh starts its own)" >&2
    fi
  done
}
sudo=""
[ "$(id -u)" = 0 ] || ! command -v sudo >/dev/null || sudo="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  disable_eval_services
  exit 0
fi

if [ "$(id -u)" != 0 ] && [ -z "$sudo" ]; then
  echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
if [ "$want_arm64" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
# The servers' packages start and enable their system services on install. A policy-rc.d that
# answers 101 ("action forbidden") for the length of the install keeps invoke-rc.d (and so
# deb-systemd-invoke) from starting any; a policy-rc.d already there is put back afterwards.
policy=/usr/sbin/policy-rc.d
if [ "$want_eval" = 1 ]; then
  $sudo rm -f "$policy.install-deps"
  [ -e "$policy" ] && $sudo mv "$policy" "$policy.install-deps"
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"; [ -e "$policy.install-deps" ] && $sudo mv "$policy.install-deps" "$policy"' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
disable_eval_services
