#!/usr/bin/env bash
# The last-level cache on a virtual machine without /sys/devices/system/cpu/cpu0/cache
# (firecracker, some KVM guests), made here by hiding that directory in a mount namespace:
# the figure `attnlab peak --memory` reports comes from the CPU (CPUID) or is bounded by
# 48 MiB per core, never the host's whole L3 that sysconf reports (320-508 MiB on such guests),
# and the probe's buffer stays within a quarter of the memory available.
# Needs root (unshare -m); 77 = skipped.
# Usage: llc_without_sysfs.sh ATTNLAB_CLI
set -euo pipefail
cli=$1
cores=$(nproc)
llc_of() {  # the "N MiB last-level cache" of a peak --memory run, and its buffer's MiB
  sed -nE 's/.*over a ([0-9]+) MiB buffer.* the ([0-9]+) MiB last-level cache.*/\1 \2/p' <<< "$1"
}
check() {  # check WHAT OUTPUT
  read -r buffer llc <<< "$(llc_of "$2")"
  [[ -n "$llc" ]] || { echo "$1: no last-level cache in: $2" >&2; exit 1; }
  (( llc > 0 && llc <= 48 * cores )) || { echo "$1: $llc MiB last-level cache for $cores cores" >&2; exit 1; }
  local avail_mib=$(( $(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo) / 1024 ))
  (( buffer <= avail_mib / 4 + 1 )) || { echo "$1: a $buffer MiB probe with $avail_mib MiB available" >&2; exit 1; }
  echo "$1: $llc MiB last-level cache, $buffer MiB probe ($cores cores)"
}
run_peak() { "$@" peak --memory --passes 1 --threads 1; }
check "with sysfs" "$(run_peak "$cli")"
if [[ ! -d /sys/devices/system/cpu/cpu0/cache ]]; then
  echo "llc_without_sysfs: ok (this machine has no cpu0/cache already)"
  exit 0
fi
if ! unshare -m true 2> /dev/null; then echo "llc_without_sysfs: no mount namespace here (not root): skipped"; exit 77; fi
hidden=$(unshare -m sh -c 'mount -t tmpfs none /sys/devices/system/cpu/cpu0/cache && exec "$@" peak --memory --passes 1 --threads 1' sh "$cli")
check "without sysfs" "$hidden"
echo "llc_without_sysfs: ok"
