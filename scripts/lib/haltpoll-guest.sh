# shellcheck shell=bash
# Shell functions of the scripts that measure a real haltpoll guest (sourced, not run).

# require_haltpoll_driver <cpuidle_dir> <who>: succeeds when <cpuidle_dir>/current_driver reads
# haltpoll; otherwise says why on stderr and fails. Without the cpuidle-haltpoll driver the
# haltpoll parameters reach no idle path (/sys/module/haltpoll/parameters may still exist: the
# governor is built in), so every cell would measure the same kernel and the run would be wasted.
require_haltpoll_driver() {
  local dir=$1 who=$2 driver
  if ! driver="$(cat "$dir/current_driver" 2>/dev/null)"; then
    echo "$who: $dir/current_driver is unreadable: no cpuidle on this kernel, nothing to measure" >&2
    return 1
  fi
  if [ "$driver" != haltpoll ]; then
    echo "$who: the cpuidle driver is '$driver', not haltpoll: guest_halt_poll_ns reaches no idle path here," \
      "so every cell would measure the same kernel. The cpuidle-haltpoll driver registers on KVM when the host" \
      "gives the realtime hint (KVM_HINTS_REALTIME, QEMU's kvm-hint-dedicated=on) or when the guest boots with" \
      "cpuidle_haltpoll.force=1" >&2
    return 1
  fi
}

# make_fake_root <dir> <who>: makes <dir> a fake haltpoll guest of 2 CPUs (tests/fleet/fake_guest.py)
# for a smoke run, and prints its absolute path. Never the real tree: it refuses /, /sys, /proc and
# anything under them, a directory on a sysfs or procfs, one that holds more than a fake tree made
# before (sys, proc and dev only), and a tree whose directories lead out of it through a link.
# Run from the source root.
make_fake_root() {
  local root who=$2 d
  root="$(realpath -m "$1")"
  case "$root" in
    / | /sys | /sys/* | /proc | /proc/*) echo "$who: smoke mode refuses the fake root $root" >&2; return 1 ;;
  esac
  mkdir -p "$root"
  case "$(stat -f -c %T "$root")" in
    sysfs | proc) echo "$who: smoke mode refuses $root: it is a $(stat -f -c %T "$root")" >&2; return 1 ;;
  esac
  if [ -n "$(find "$root" -mindepth 1 -maxdepth 1 ! -name sys ! -name proc ! -name dev)" ]; then
    echo "$who: smoke mode refuses the fake root $root: it holds more than a fake tree" >&2; return 1
  fi
  python3 tests/fleet/fake_guest.py "$root" --cpus 2 --init-only >&2 || return 1
  for d in sys sys/module/haltpoll/parameters sys/devices/system/cpu proc; do
    case "$(realpath "$root/$d")" in
      "$root"/*) ;;
      *) echo "$who: smoke mode refuses $root/$d: it leads out of the fake root" >&2; return 1 ;;
    esac
  done
  echo "$root"
}

# guest_write <fake_root> <who> <value> <file>: every write of a parameter, the governor or a kernel
# setting. An empty <fake_root> (a real run) writes <file> as it is; in a smoke run <file> must lie
# under <fake_root> and not on a sysfs or procfs, otherwise the script exits before writing.
guest_write() {
  local root=$1 who=$2 real
  [ -n "$root" ] || { echo "$3" > "$4"; return; }
  real="$(realpath -m "$4")"
  case "$real" in
    "$root"/*) ;;
    *) echo "$who: smoke mode refuses to write $real (outside $root)" >&2; exit 1 ;;
  esac
  case "$(stat -f -c %T "$(dirname "$real")" 2>/dev/null)" in
    sysfs | proc) echo "$who: smoke mode refuses to write $real (a kernel file system)" >&2; exit 1 ;;
  esac
  echo "$3" > "$4"
}
