#!/bin/bash
# hostinit.sh: PID 1 of a fresh pid+mount+uts+ipc+cgroup namespace, started by labctl inside the
# host's network namespace. It builds the host's root (overlay on the cached image), provisions it
# (every boot, idempotent), rebuilds the hardware stand-ins, pivot_roots into it and execs systemd.
# Usage: hostinit.sh NAME HOSTDIR LOWER BINDIR SHARE
set -euo pipefail
NAME=$1 HD=$2 LOWER=$3 BIN=$4 SHARE=$5
R=$HD/root
mkdir -p "$HD/upper" "$HD/work" "$R" "$HD/tmp" "$HD/vols/var_lib_docker"
chmod 1777 "$HD/tmp"
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$HD/upper,workdir=$HD/work" "$R"
mount -t proc proc "$R/proc"            # this pid namespace only
mount -t sysfs sysfs "$R/sys"           # /sys/class/net of this netns only

# Private cgroup namespace rooted at /sparklab/NAME (cgjoin.sh put us there before `unshare --cgroup`):
# fresh cgroup mounts show only that subtree, so systemd and docker's runc keep everything below it.
mount -t tmpfs -o mode=755,size=4m tmpfs "$R/sys/fs/cgroup"
awk '($3=="cgroup"||$3=="cgroup2") && $2 ~ "^/sys/fs/cgroup/" {print $2, $3, $4}' /proc/self/mounts |
while read -r mp fs opts; do
  mkdir -p "$R$mp"
  if [ "$fs" = cgroup2 ]; then mount -t cgroup2 cgroup2 "$R$mp"; continue; fi
  o=$(echo "$opts" | tr , '\n' | grep -vxE 'rw|ro|relatime|noatime|nosuid|nodev|noexec' | paste -sd, -)
  mount -t cgroup -o "$o" cgroup "$R$mp"
done
for l in /sys/fs/cgroup/*; do [ -L "$l" ] && ln -sfn "$(readlink "$l")" "$R$l"; done

mount -t tmpfs -o mode=755,size=16m tmpfs "$R/dev"
for d in null zero full random urandom tty fuse; do
  [ -e "/dev/$d" ] || continue
  touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"
done
# GPU stand-in device nodes (c 1 5: opening them works, nothing else is needed).
for d in nvidia0 nvidiactl nvidia-uvm nvidia-uvm-tools; do mknod -m 666 "$R/dev/$d" c 1 5; done
# RDMA stand-in device nodes, one uverbs per CX7 function (rocep1s0f0 .. roceP2p1s0f1) plus rdma_cm, as
# mlx5_ib makes them. A container sees them only through --device; the stand-in's NCCL needs them for NET/IB.
mkdir -p "$R/dev/infiniband"
for d in uverbs0 uverbs1 uverbs2 uverbs3 rdma_cm; do mknod -m 666 "$R/dev/infiniband/$d" c 1 5; done
mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$R/dev/pts"
ln -sf pts/ptmx "$R/dev/ptmx"; ln -sf /proc/self/fd "$R/dev/fd"
ln -sf /proc/self/fd/0 "$R/dev/stdin"; ln -sf /proc/self/fd/1 "$R/dev/stdout"; ln -sf /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=1777,size=50% tmpfs "$R/dev/shm"   # Ray's object store wants > 30% of RAM here
mount -t mqueue mqueue "$R/dev/mqueue"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
# Unified memory (the lab's model of a GB10 driver's view of the one pool): ranks keep what the driver leaks on an
# unclean exit here, in the host's memory, until the next boot (empty again then, like every /run). The docker
# wrapper binds it into every container. `labctl break leak` writes leak-mib here.
mkdir -p "$R/run/sparklab/uvm"
mount --bind "$HD/tmp" "$R/tmp"
# docker's overlay2 refuses an overlayfs upper: /var/lib/docker is a per-host dir on the real ext4.
mkdir -p "$R/var/lib/docker"; mount --bind "$HD/vols/var_lib_docker" "$R/var/lib/docker"
# Shared read-only software (Ray venv, runtime image tarball), same path as on the machine.
mkdir -p "$R$SHARE"; mount --bind "$SHARE" "$R$SHARE"; mount -o remount,bind,ro "$R$SHARE"
hostname "$NAME"

# Hardware stand-ins and helper scripts, refreshed from the lab checkout at every boot.
install -D -m 755 "$BIN/nvidia-smi" "$R/usr/bin/nvidia-smi"
install -D -m 755 "$BIN/rdma_fixture.py" "$R/usr/local/sbin/sparklab-rdma-fixture"
install -D -m 755 "$BIN/docker-wrapper.sh" "$R/usr/local/sbin/sparklab-docker-wrapper"

# ---- every-boot provisioning inside the host's root (idempotent) ----
chroot "$R" /bin/bash -s "$NAME" <<'EOF'
set -euo pipefail
NAME=$1
echo "$NAME" >/etc/hostname
cat >/etc/hosts <<H
127.0.0.1	localhost
127.0.1.1	$NAME
::1	localhost ip6-localhost ip6-loopback
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
H
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >/etc/resolv.conf   # no DNS: fail fast, locally
if [ ! -e /etc/ssh/.sparklab-keys ]; then
  rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; touch /etc/ssh/.sparklab-keys
fi
id spark >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo spark
echo "spark ALL=(ALL) NOPASSWD:ALL" >/etc/sudoers.d/90-sparklab; chmod 440 /etc/sudoers.d/90-sparklab
for home in /root /home/spark; do
  install -d -m 700 "$home/.ssh"; install -m 600 /etc/sparklab-authorized_keys "$home/.ssh/authorized_keys"
done
chown -R spark:spark /home/spark/.ssh
install -d -o spark -g spark /models
mkdir -p /etc/ssh/sshd_config.d
ln -sf /dev/null /etc/systemd/system/console-getty.service   # its /dev/console is a log file
cat >/etc/ssh/sshd_config.d/10-sparklab.conf <<'C'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
MaxStartups 100:30:200
MaxSessions 50
C
/usr/local/sbin/sparklab-rdma-fixture
# Locked memory. This machine grants no CAP_SYS_RESOURCE, so no process here can raise RLIMIT_MEMLOCK above the
# hard limit it inherited (8 MiB): `docker run --ulimit memlock=-1` would fail in runc. Services get Docker's usual
# container default (soft 64 KiB) under that ceiling, and the host's docker maps memlock=-1 ("unlimited") to the
# ceiling, which the stand-in's NCCL counts as unlimited (soft == hard >= 8 MiB). Without the flag a container keeps
# 64 KiB, and NCCL there falls back to NET/Socket, as on a real Spark.
hard=$(ulimit -Hl)
if [ "$hard" = unlimited ]; then hard=infinity; else hard=$((hard * 1024)); fi
mkdir -p /etc/systemd/system.conf.d
printf '[Manager]\nDefaultLimitMEMLOCK=65536:%s\n' "$hard" >/etc/systemd/system.conf.d/10-sparklab-memlock.conf
if ! grep -q sparklab-docker-wrapper /usr/bin/docker 2>/dev/null; then
  mv /usr/bin/docker /usr/bin/docker.real
fi
install -m 755 /usr/local/sbin/sparklab-docker-wrapper /usr/bin/docker
EOF

touch "$R/dev/console"; mount --bind /proc/self/fd/1 "$R/dev/console"   # console -> console.log
export container=other
# pivot_root, not chroot: after a chroot the mount namespace's root is still the machine's "/", and
# every setns(CLONE_NEWNS) into this host (runc exec = `docker exec`, nsenter) would land there.
mkdir -p "$R/.sparklab-oldroot"
cd "$R"
pivot_root . .sparklab-oldroot
umount -l /.sparklab-oldroot
rmdir /.sparklab-oldroot 2>/dev/null || true
exec /lib/systemd/systemd --system
