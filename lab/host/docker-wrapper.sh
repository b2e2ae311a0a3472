#!/bin/sh
# sparklab-docker-wrapper (lab hosts' /usr/bin/docker; the real CLI is /usr/bin/docker.real).
# 1. This machine grants no CAP_SYS_RESOURCE, so `--ulimit memlock=-1` would fail in runc; it becomes the highest limit
#    the lab can grant (the inherited hard limit, soft = hard), which the stand-in's NCCL counts as unlimited. See
#    hostinit.sh.
# 2. Unified memory: every `docker run` / `docker create` (also `docker container run|create`) gets the host's memory
#    cgroup read-only at /run/sparklab/hostmem (the host's limit and usage: what a GB10's driver reports as the GPU's
#    total and free memory, since GPU memory is the host's) and the host's tmpfs /run/sparklab/uvm read-write at the
#    same path (where the stand-in's ranks hold what a GB10 driver leaks; hostinit.sh makes it at every boot).
#    The same cgroup is also bound over the container's own memory cgroup view (/sys/fs/cgroup/memory on v1,
#    /sys/fs/cgroup on v2), read-only: a real component that sizes itself from its cgroup reads the host's memory
#    there, as on a Spark, whose containers have no memory limit and so read the whole host (the GPU's allocations
#    included). Ray's memory monitor and its `memory` resource are the ones that matter: Ray takes the smaller of
#    /proc/meminfo (this machine's) and that cgroup limit (the host's), so in the lab it watches the host. (Ray reads
#    a cgroup's used memory as rss + cache - inactive_file, /proc/meminfo's as MemTotal - MemAvailable: the lab's
#    monitor counts the active page cache, a Spark's does not; the lab is stricter, never more lenient.)
# shellcheck disable=SC3045  # the hosts' /bin/sh is dash, whose ulimit has -H
ceil=$(ulimit -Hl)
[ "$ceil" = unlimited ] || ceil=$((ceil * 1024))
hostmem=""
if [ -e /sys/fs/cgroup/memory/memory.usage_in_bytes ]; then hostmem=/sys/fs/cgroup/memory
elif [ -e /sys/fs/cgroup/memory.current ]; then hostmem=/sys/fs/cgroup
fi
n=$#
pos=0  # 0: before the command word, 1: after `container`, 2: past the command
skip=0
for a in "$@"; do
  if [ "$ceil" != unlimited ]; then
    case $a in
      memlock=-1 | memlock=-1:-1 | memlock=unlimited) a=memlock=$ceil:$ceil ;;
      --ulimit=memlock=-1 | --ulimit=memlock=-1:-1) a=--ulimit=memlock=$ceil:$ceil ;;
    esac
  fi
  set -- "$@" "$a"
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  [ "$pos" = 2 ] && continue
  case $a in
    -H | --host | -c | --context | --config | -l | --log-level | --tlscacert | --tlscert | --tlskey) skip=1 ;;
    -*) ;;
    container) if [ "$pos" = 0 ]; then pos=1; else pos=2; fi ;;
    run | create)
      pos=2
      if [ -n "$hostmem" ]; then
        set -- "$@" -v "$hostmem:/run/sparklab/hostmem:ro"
        set -- "$@" -v "$hostmem:$hostmem:ro"
      fi
      if [ -d /run/sparklab/uvm ]; then set -- "$@" -v /run/sparklab/uvm:/run/sparklab/uvm; fi
      ;;
    *) pos=2 ;;
  esac
done
shift "$n"
exec /usr/bin/docker.real "$@"
