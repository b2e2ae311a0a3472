#!/bin/bash
# cgjoin.sh NAME CMD...: move this process into /sparklab/NAME in every cgroup hierarchy, then exec CMD
#   (which runs `unshare --cgroup`, so the host's cgroup namespace is rooted at /sparklab/NAME).
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

NAME=$1; shift
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
  echo $$ >"$h/$TOP/$NAME/cgroup.procs"
done
exec "$@"
