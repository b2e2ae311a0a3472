#!/bin/bash
# cgjoin.sh NAME CMD...: move this process into /sparklab/NAME in every cgroup hierarchy, then exec CMD
#   (which runs `unshare --cgroup`, so the host's cgroup namespace is rooted at /sparklab/NAME).
# cgjoin.sh --mem BYTES NAME CMD...: the same, after setting the host's memory limit (its whole memory, as a GB10's
#   GPU memory is the host's: v1 memory.limit_in_bytes, v2 memory.max; 0 = no limit), clearing what a previous boot
#   left there (the wedge knob's oom_kill_disable / memory.high, the old boot's page cache).
# cgjoin.sh --clean NAME: remove /sparklab/NAME everywhere, including the v1 hierarchies that the
#   machine does not mount (a host's systemd mounts perf_event, hugetlb, net_cls itself).
set -euo pipefail
TOP=sparklab

unmounted_groups() {  # enabled v1 controller groups that no mount here shows
  local mounted grp c skip
  mounted=" $(awk '$3=="cgroup"{print $4}' /proc/self/mounts | tr ',\n' '  ') "
  awk 'NR>1 && $4==1 {print $2, $1}' /proc/cgroups | awk '
    $1!=0 {g[$1]=g[$1] (g[$1]?",":"") $2; next}
    {k=$2; if (k=="cpuacct") k="cpu"; if (k=="net_prio") k="net_cls"; u[k]=u[k] (u[k]?",":"") $2}
    END {for (h in g) print g[h]; for (k in u) print u[k]}' |
  while read -r grp; do
    skip=0
    for c in ${grp//,/ }; do case $mounted in *" $c "*) skip=1 ;; esac; done
    [ $skip = 1 ] || echo "$grp"
  done
}

in_hierarchy() {  # GROUP SCRIPT: run SCRIPT with $D = a private mount of that v1 hierarchy
  # shellcheck disable=SC2016  # expanded by the inner bash, on purpose
  unshare -m --propagation private bash -c 'D=$(mktemp -d /tmp/.sparklab-cg.XXXXXX); rc=0
    mount -t cgroup -o "$1" cgroup "$D" && { eval "$2" || rc=$?; umount "$D"; }; rmdir "$D"; exit $rc' bash "$1" "$2"
}

if [ "$1" = --clean ]; then
  NAME=$2
  unmounted_groups | while read -r g; do
    in_hierarchy "$g" "[ ! -d \$D/$TOP/$NAME ] || find \$D/$TOP/$NAME -depth -type d -exec rmdir {} +; rmdir \$D/$TOP 2>/dev/null; true"
  done
  for h in /sys/fs/cgroup/*; do
    [ -L "$h" ] && continue
    if [ -d "$h/$TOP/$NAME" ]; then find "$h/$TOP/$NAME" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
    if [ -d "$h/$TOP" ]; then rmdir "$h/$TOP" 2>/dev/null || true; fi
  done
  exit 0
fi

MEM=""
if [ "$1" = --mem ]; then MEM=$2; shift 2; fi
NAME=$1; shift

set_mem() {  # DIR: a fresh boot's memory settings on the host's memory cgroup (v1 or v2)
  local d=$1 lim=$MEM
  if [ -e "$d/memory.limit_in_bytes" ]; then
    [ -s "$d/cgroup.procs" ] || echo 0 >"$d/memory.force_empty" 2>/dev/null || true   # a reboot empties the cache
    echo 0 >"$d/memory.oom_control" 2>/dev/null || true
    [ "$lim" = 0 ] && lim=-1
    echo "$lim" >"$d/memory.limit_in_bytes" || echo "cgjoin: $d: memory limit $lim not set" >&2
  elif [ -e "$d/memory.max" ]; then
    [ -s "$d/cgroup.procs" ] || echo 1T >"$d/memory.reclaim" 2>/dev/null || true
    echo max >"$d/memory.high"
    [ "$lim" = 0 ] && lim=max
    echo "$lim" >"$d/memory.max" || echo "cgjoin: $d: memory.max $lim not set" >&2
  fi
}

# Pure cgroup v2 (/sys/fs/cgroup is the unified hierarchy): the memory controller down to /sparklab/NAME.
if [ -n "$MEM" ] && [ -e /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  mkdir -p "/sys/fs/cgroup/$TOP"
  echo +memory >/sys/fs/cgroup/cgroup.subtree_control
  echo +memory >"/sys/fs/cgroup/$TOP/cgroup.subtree_control"
  mkdir -p "/sys/fs/cgroup/$TOP/$NAME"
  set_mem "/sys/fs/cgroup/$TOP/$NAME"
  echo $$ >"/sys/fs/cgroup/$TOP/$NAME/cgroup.procs"
fi
unmounted_groups | while read -r g; do
  in_hierarchy "$g" "mkdir -p \$D/$TOP/$NAME && echo $$ >\$D/$TOP/$NAME/cgroup.procs"
done
for h in /sys/fs/cgroup/*; do
  [ -L "$h" ] && continue
  [ -e "$h/cgroup.procs" ] || continue
  mkdir -p "$h/$TOP/$NAME"
  if [ -e "$h/cpuset.cpus" ]; then
    for f in cpuset.cpus cpuset.mems; do cat "$h/$f" >"$h/$TOP/$f"; cat "$h/$f" >"$h/$TOP/$NAME/$f"; done
  fi
  if [ -n "$MEM" ]; then set_mem "$h/$TOP/$NAME"; fi
  echo $$ >"$h/$TOP/$NAME/cgroup.procs"
done
exec "$@"
