#!/bin/sh
# chainermn-rt: run a command inside a Debian root with pivot_root (chroot is not enough for
# Apptainer). Run it in a mount namespace of its own (chainermn_rt/sandbox/root.py):
#   unshare --mount --propagation private [--uts] sh enter-root.sh \
#       ROOTFS OVERLAY HOSTNAME [SOURCE TARGET]... -- COMMAND [ARGS...]
# OVERLAY: an empty folder where a tmpfs takes what the command writes into the root (the root
# itself stays unchanged), or "-" to write into ROOTFS (building it). HOSTNAME: "-" keeps the
# current one (it needs `unshare --uts`). Each SOURCE is bind-mounted at TARGET inside.
# A failure before COMMAND runs: one line on stderr, exit status 125.
fail() { echo "enter-root: $*" >&2; exit 125; }
[ $# -ge 4 ] || fail "usage: ROOTFS OVERLAY HOSTNAME [SOURCE TARGET]... -- COMMAND"
rootfs=$1 overlay=$2 name=$3
shift 3
here=$(pwd)
if [ "$overlay" = - ]; then
    new=$rootfs
    mount --bind "$rootfs" "$new" || fail "cannot bind $rootfs onto itself"
else
    mount -t tmpfs -o mode=0755 chainermn-rt "$overlay" || fail "cannot mount a tmpfs on $overlay"
    mkdir "$overlay/upper" "$overlay/work" "$overlay/root"
    mount -t overlay -o "lowerdir=$rootfs,upperdir=$overlay/upper,workdir=$overlay/work" \
        chainermn-rt "$overlay/root" || fail "cannot mount an overlay of $rootfs"
    new=$overlay/root
fi
mount -t proc proc "$new/proc" || fail "cannot mount /proc in $new"
mount --rbind /sys "$new/sys" && mount --rbind /dev "$new/dev" || fail "cannot bind /sys, /dev"
mount -t tmpfs -o mode=0755 tmpfs "$new/run" || fail "cannot mount a tmpfs on $new/run"
if [ "$name" != - ]; then hostname "$name" || fail "cannot set the hostname (unshare --uts?)"; fi
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    [ $# -ge 3 ] || fail "a bind needs SOURCE and TARGET: $1"
    if [ -d "$1" ]; then
        mkdir -p "$new$2"
    elif [ ! -e "$new$2" ]; then
        mkdir -p "$(dirname "$new$2")" && : > "$new$2"
    fi
    mount --bind "$1" "$new$2" || fail "cannot bind $1 at $2"
    shift 2
done
[ "${1-}" = -- ] || fail "no -- before the command"
shift
[ $# -gt 0 ] || fail "no command"
cd "$new" && mkdir -p .oldroot || fail "cannot make $new/.oldroot"
pivot_root . .oldroot || fail "pivot_root failed in $new (a root file system that cannot be pivoted?)"
umount -l /.oldroot || fail "cannot detach the old root"
cd "$here" 2>/dev/null || cd /
exec "$@"
