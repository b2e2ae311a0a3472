#!/bin/sh
# sparklab-docker-wrapper (lab hosts' /usr/bin/docker; the real CLI is /usr/bin/docker.real): this machine grants no
# CAP_SYS_RESOURCE, so `--ulimit memlock=-1` would fail in runc; it becomes the highest limit the lab can grant (the
# inherited hard limit, soft = hard), which the stand-in's NCCL counts as unlimited. See hostinit.sh.
ceil=$(ulimit -Hl)
[ "$ceil" = unlimited ] && exec /usr/bin/docker.real "$@"
ceil=$((ceil * 1024))
n=$#
for a in "$@"; do
  case $a in
    memlock=-1 | memlock=-1:-1 | memlock=unlimited) a=memlock=$ceil:$ceil ;;
    --ulimit=memlock=-1 | --ulimit=memlock=-1:-1) a=--ulimit=memlock=$ceil:$ceil ;;
  esac
  set -- "$@" "$a"
done
shift "$n"
exec /usr/bin/docker.real "$@"
