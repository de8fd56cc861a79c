#!/usr/bin/env bash
# The README's quick start on a fresh Debian 12 root, as a new user would run it: builds a
# minimal Debian 12 root with mmdebstrap from this machine's own apt sources (or reuses today's
# tarball of it from the cache), clones this repository (its HEAD commit) into it as
# /work/numallm with ../shared mounted read-only beside it as /work/shared, and runs the two
# commands of README.md's "Quick start" block exactly as written there, one after the other, as
# root (or, with --user, as a user with sudo rights). A command that fails ends the run with its
# last lines. The root's mounts (/proc, /sys, /dev, a fresh /dev/shm for Open MPI) live in a
# private mount and PID namespace, so they, and any process left in the root, go with it.
#
# Usage (as root): tests/fresh_root.sh [options]
#   --test-args "ARGS"   appended to the second command (tests/run.sh): CI passes a label here
#   --without PKG        make the apt package PKG unavailable in the root (pinned to -1), to
#                        check that numallm configures, builds and tests without an optional
#                        part (repeatable)
#   --user               run the commands as a user with sudo rights instead of root
#   --keep               keep the root's directory afterwards (its path is printed)
# Environment: NM_FRESH_CACHE (root tarballs, default /var/cache/numallm-ci), NM_FRESH_DIR
# (where the root is unpacked, default /var/tmp; it needs NM_FRESH_NEED_GB free, default 10),
# NM_FRESH_SOURCES (an apt sources file for the root, default this machine's Debian bookworm
# entries),
# NM_FRESH_LIMIT_S (seconds a command may run before it is stopped as hung, default 3600),
# NM_FRESH_DEADLINE (a time, in seconds since 1970, by which every command is stopped: CI's).
# The tarball is keyed by the apt sources, the mmdebstrap options and the UTC date; a build is
# never cached. Exit: 0 both commands exited 0; 1 one failed; 2 the root could not be made.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "$SRC/.." && pwd)/shared
CACHE=${NM_FRESH_CACHE:-/var/cache/numallm-ci}
BASE=${NM_FRESH_DIR:-/var/tmp}

test_args="" without=() as_user=0 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --test-args) test_args=$2; shift 2 ;;
    --without) without+=("$2"); shift 2 ;;
    --user) as_user=1; shift ;;
    --keep) keep=1; shift ;;
    *) echo "fresh_root: unknown option $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
say() { echo "fresh_root: $*"; }
die() { echo "fresh_root: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root, chroot, mounts)"
[ -d "$SHARED" ] || die "no $SHARED beside the repository"

# The two quick-start commands, from README.md itself, without their comments.
mapfile -t cmds < <(awk '/^## Quick start/ { q = 1 } q && /^```sh/ { b = 1; next }
                         q && b && /^```/ { exit } q && b && NF { print }' "$SRC/README.md" |
                    sed 's/[[:space:]]*#.*$//')
[ ${#cmds[@]} = 2 ] || die "README.md's quick start block has ${#cmds[@]} commands, not 2"
[ -z "$test_args" ] || cmds[1]="${cmds[1]} $test_args"

# ---- the root tarball: this machine's apt sources for Debian 12 (bookworm) ----
command -v mmdebstrap >/dev/null || {
  say "installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends mmdebstrap >/dev/null || die "cannot install mmdebstrap"
}
sources=$(mktemp)
root="" log_dir=""
# A root whose run was killed (SIGKILL, a lost machine) stays behind: the next run removes it when
# the run that made it (its .owner file beside it) is gone and nothing is mounted in it.
remove_stale_roots() {
  local d pid
  for d in "$BASE"/numallm-fresh.*; do
    [ -d "$d" ] || continue
    pid=$(cat "$d.owner" 2>/dev/null || true)
    [ "$pid" != kept ] || continue                                        # --keep: left on purpose
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then continue; fi    # its run is still going
    [ -n "$pid" ] || [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ] || continue # no owner file: an older script's, if old
    if findmnt -rn -o TARGET | grep -q "^$d"; then continue; fi
    say "removing $d, left by an interrupted run"
    rm -rf --one-file-system "$d" "$d.owner"
  done
}
cleanup() {
  rm -f "$sources"
  if [ -n "$root" ]; then
    if [ $keep = 1 ]; then echo kept >"$root.owner"; else rm -f "$root.owner"; fi
  fi
  if [ -n "$root" ] && [ -d "$root" ] && [ $keep = 0 ]; then
    # The mounts were in the namespace that ended with the run; never delete through one.
    if findmnt -rn -o TARGET | grep -q "^$root"; then
      echo "fresh_root: $root still has mounts; not deleted" >&2
    else
      rm -rf --one-file-system "$root"
    fi
  fi
}
trap cleanup EXIT
trap "exit 143" TERM INT   # the EXIT trap runs on these too; --kill-child below ends the root's processes
if [ -n "${NM_FRESH_SOURCES:-}" ]; then
  cp "$NM_FRESH_SOURCES" "$sources"
else
  # deb822 stanzas (sources.list.d/*.sources) and one-line entries (*.list, sources.list) that
  # name a bookworm suite; others (third-party repositories, another release) are left out.
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; ORS = "\n\n" } /\nSuites:[^\n]*bookworm/ && !/\nEnabled: *no/' "$f"
  done >"$sources"
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    grep -E '^deb[[:space:]].*[[:space:]]bookworm(-[a-z]+)?[[:space:]]' "$f" || true
  done >>"$sources"
  [ -s "$sources" ] || echo "deb http://deb.debian.org/debian bookworm main" >"$sources"
fi
mm_opts=(--variant=apt --include=ca-certificates,git --mode=root --aptopt='Acquire::Retries "3"')
key=$( (cat "$sources"; echo "${mm_opts[*]}"; date -u +%F) | sha256sum | cut -c1-16)
tarball=$CACHE/debian12-$key.tar
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$tarball" ]; then
  say "Debian 12 root: $tarball (cached today; only the root, never a build)"
else
  say "Debian 12 root: mmdebstrap ${mm_opts[*]} bookworm, sources:"
  grep -E '^(URIs|Suites|deb)' "$sources" | sed 's/^/  /'
  t0=$(date +%s)
  part=$CACHE/partial.tar   # mmdebstrap picks the format from the name's extension
  if ! mmdebstrap "${mm_opts[@]}" bookworm "$part" "$sources" >"$CACHE/mmdebstrap.log" 2>&1; then
    tail -20 "$CACHE/mmdebstrap.log" >&2
    rm -f "$part"
    die "mmdebstrap failed (log: $CACHE/mmdebstrap.log)"
  fi
  find "$CACHE" -maxdepth 1 -name 'debian12-*.tar' -delete   # older days' roots
  mv "$part" "$tarball"
  say "made in $(($(date +%s) - t0)) s"
fi
flock -u 9

# ---- unpack, clone, configure the root ----
remove_stale_roots
# the root with its packages, its build and the tests' files: 9.3 GB at the peak (sampled during
# CI's run, 2026-11-27); a full disk would otherwise show up as apt's or the compiler's write
# errors in the middle of a command
need_gb=${NM_FRESH_NEED_GB:-10}
free_gb=$(df --output=avail -B1G "$BASE" | tail -1 | tr -d ' ')
[ "$free_gb" -ge "$need_gb" ] ||
  die "only $free_gb GB free in $BASE; the root, its packages and its builds need about $need_gb GB (NM_FRESH_DIR names another place)"
root=$(mktemp -d "$BASE/numallm-fresh.XXXXXX")
echo $$ >"$root.owner"
tar -C "$root" -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
sha=$(git -C "$SRC" rev-parse HEAD)
git clone -q --no-checkout "$(git -C "$SRC" rev-parse --path-format=absolute --git-common-dir)" "$root/work/numallm"
git -C "$root/work/numallm" checkout -q --detach "$sha"
mkdir -p "$root/work/shared"
say "clone of $sha in /work/numallm; $SHARED mounted read-only beside it as /work/shared"
if [ ${#without[@]} -gt 0 ]; then
  for p in "${without[@]}"; do
    printf 'Package: %s\nPin: release *\nPin-Priority: -1\n\n' "$p"
  done >"$root/etc/apt/preferences.d/numallm-without"
  say "made unavailable in the root: ${without[*]}"
fi
run_as="" home=/root
# in_root SCRIPT: runs SCRIPT in the root with its own mounts, in a clean environment. A SCRIPT
# that hangs is stopped after NM_FRESH_LIMIT_S, and with it every process in the root (timeout
# stops unshare, which SIGKILLs the namespace's first process: --kill-child).
in_root() {
  local limit=${NM_FRESH_LIMIT_S:-3600}
  [ -z "${NM_FRESH_DEADLINE:-}" ] || limit=$((NM_FRESH_DEADLINE - $(date +%s)))
  [ "$limit" -gt 0 ] || limit=1
  timeout -k 30 "$limit" unshare --mount --pid --fork --kill-child --propagation private /bin/bash -c '
    set -e
    R=$1 S=$2
    mount -t proc proc "$R/proc"
    mount --rbind /sys "$R/sys"
    mount --rbind /dev "$R/dev"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$R/dev/shm"
    mount --bind "$S" "$R/work/shared"
    mount -o remount,bind,ro "$R/work/shared"
    shift 2
    exec chroot "$R" "$@"' _ "$root" "$SHARED" \
    /usr/bin/env -i HOME=$home LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    $run_as /bin/bash -c "cd /work/numallm && $1" </dev/null
}

if [ $as_user = 1 ]; then
  # A user with sudo rights and no password prompt (no terminal in CI), owning the clone.
  in_root 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sudo >/dev/null &&
           useradd -m -s /bin/bash newuser && chown -R newuser: /work/numallm &&
           echo "newuser ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/newuser' ||
    die "cannot make a sudo user in the root"
  run_as="sudo -u newuser -H" home=/home/newuser
  say "the commands run as newuser, who has sudo rights"
fi

log_dir=$(mktemp -d "$BASE/numallm-fresh-logs.XXXXXX")
status=0
for i in 0 1; do
  cmd=${cmds[$i]}
  say "\$ $cmd"
  t0=$(date +%s)
  rc=0
  in_root "$cmd" >"$log_dir/cmd$((i + 1)).log" 2>&1 || rc=$?
  secs=$(($(date +%s) - t0))
  say "command $((i + 1)) exited $rc after $secs s ($((secs / 60)) min $((secs % 60)) s); log: $log_dir/cmd$((i + 1)).log"
  grep -E '^(-- )?numallm: optional parts|^setup: |^\| *qwen|tests passed|^== |\(Skipped\)|Failed|Not Run' \
    "$log_dir/cmd$((i + 1)).log" | sed 's/^/  /' || true
  if [ $rc != 0 ]; then
    [ $rc != 124 ] || say "stopped: it ran past NM_FRESH_LIMIT_S or NM_FRESH_DEADLINE"
    say "FAIL: \"$cmd\" exited $rc; its last lines:"
    tail -40 "$log_dir/cmd$((i + 1)).log" | sed 's/^/  | /'
    status=1
    break
  fi
done
[ $keep = 0 ] || say "kept the root: $root"
exit $status
