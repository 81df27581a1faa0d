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
