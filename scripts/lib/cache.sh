# shellcheck shell=bash
# Building into the shared cache ($HUBWRIGHT_CACHE, default ~/.cache/hubwright) and placing into .tools safely
# when several runs share them: a CI run and a clean clone's run on one machine share the cache, and one clone
# may run twice. Sourced (bash) by scripts/tools.sh, haproxy.sh, gitea.sh, crds.sh, crds-gen.sh and venv.sh.
#
# Three rules make it safe:
#   - one build of one output at a time: a lock (flock) on the hidden file .NAME.lock beside the output NAME.
#     A run that finds it held says so and waits; then it finds NAME there and builds nothing;
#   - a build writes under a name no other run uses (a private folder .NAME.tmp.XXXXXX beside NAME, from
#     mktemp), and the result is renamed onto NAME: a rename within one folder is atomic, so NAME is absent, the
#     old output or the new complete one, never half of one (a folder is swapped in two renames, under the lock);
#   - placing into .tools (a hard link, a copy or a symlink) writes a temporary beside it and renames it too.
#
#   cache_lock PATH [WHAT]    take the lock guarding PATH (.NAME.lock beside it), waiting while another run holds
#                             it and saying so on stderr; re-entrant. Exiting releases it.
#   cache_unlock PATH         release it (once per cache_lock)
#   cache_build [--rebuild] OUT COMMAND...
#                             make OUT once. Under OUT's lock, unless OUT is there already (CACHE_BUILT=0, nothing
#                             run; --rebuild: build anyway), run COMMAND in a subshell (set -e) with CACHE_TMP set
#                             and exported to a fresh path beside OUT, and rename what it wrote there onto OUT
#                             (CACHE_BUILT=1). A failing COMMAND leaves OUT as it was and no temporary behind; the
#                             status is COMMAND's.
#   cache_publish SRC OUT     move SRC (a file or folder, from anywhere) onto OUT, atomically, under OUT's lock
#   place_file SRC DEST       DEST becomes SRC, executable: a hard link, else a copy
#   place_copy SRC DEST       DEST becomes a copy of SRC, mode 0755 (for a read-only SRC: Go's module cache)
#   place_link TARGET DEST    DEST becomes a symlink to TARGET
#
# Locks are never removed (removing a lock file another run has open would let two runs in); temporaries left
# by a killed run are removed by the next run that takes the same lock.

# shellcheck disable=SC2034  # CACHE_BUILT is read by the scripts that source this file
declare -gA _CACHE_LOCK_FD=() _CACHE_LOCK_DEPTH=()
CACHE_BUILT=0

_cache_say() { printf '[cache] %s\n' "$*" >&2; }
_cache_lockfile() { printf '%s/.%s.lock' "$(dirname "$1")" "$(basename "$1")"; }

cache_lock() {
    local path=$1 what=${2:-$(basename "$1")} file fd
    file=$(_cache_lockfile "$path")
    if [ -n "${_CACHE_LOCK_FD[$file]:-}" ]; then
        _CACHE_LOCK_DEPTH[$file]=$(( _CACHE_LOCK_DEPTH[$file] + 1 ))
        return 0
    fi
    command -v flock >/dev/null || { _cache_say "ERROR: no flock (util-linux) to lock $file"; return 1; }
    mkdir -p "$(dirname "$file")"
    exec {fd}>>"$file"
    if ! flock -n "$fd"; then
        _cache_say "$what: waiting: another run is building it (lock: $file) ..."
        flock "$fd"
        _cache_say "$what: the other run is done"
    fi
    _CACHE_LOCK_FD[$file]=$fd
    _CACHE_LOCK_DEPTH[$file]=1
}

cache_unlock() {
    local file fd
    file=$(_cache_lockfile "$1")
    fd=${_CACHE_LOCK_FD[$file]:-}
    [ -n "$fd" ] || return 0
    _CACHE_LOCK_DEPTH[$file]=$(( _CACHE_LOCK_DEPTH[$file] - 1 ))
    [ "${_CACHE_LOCK_DEPTH[$file]}" -gt 0 ] && return 0
    exec {fd}>&-
    unset "_CACHE_LOCK_FD[$file]" "_CACHE_LOCK_DEPTH[$file]"
}

# _cache_tmpdir OUT: a fresh private folder beside OUT, after removing those a killed run left (OUT's lock held).
_cache_tmpdir() {
    local dir base
    dir=$(dirname "$1") base=$(basename "$1")
    rm -rf "$dir/.$base.tmp."*
    mktemp -d "$dir/.$base.tmp.XXXXXX"
}

# _cache_swap TMPDIR OUT: rename TMPDIR/NAME onto OUT (a folder already at OUT is moved into TMPDIR first).
_cache_swap() {
    local tmpdir=$1 out=$2 new
    new="$tmpdir/$(basename "$out")"
    if [ -d "$new" ] && [ ! -L "$new" ] && [ -e "$out" ]; then
        mv -T "$out" "$tmpdir/.old" || return 1
    fi
    mv -f -T "$new" "$out"
}

cache_build() {
    local rebuild=0
    if [ "${1:-}" = --rebuild ]; then rebuild=1; shift; fi
    local out=$1; shift
    local tmpdir rc=0 errexit=0
    CACHE_BUILT=0
    [ "$rebuild" != 1 ] && [ -e "$out" ] && return 0
    mkdir -p "$(dirname "$out")"
    cache_lock "$out" || return 1
    if [ "$rebuild" != 1 ] && [ -e "$out" ]; then
        cache_unlock "$out"
        return 0
    fi
    tmpdir=$(_cache_tmpdir "$out") || { cache_unlock "$out"; return 1; }
    # The command runs with set -e in force (inside `cmd || ...` bash would ignore it), in a subshell: a `die`
    # in it ends only the subshell, and the temporary is removed below.
    case $- in *e*) errexit=1 ;; esac
    set +e
    (
        set -e
        CACHE_TMP="$tmpdir/$(basename "$out")"
        export CACHE_TMP
        "$@"
    )
    rc=$?
    [ "$errexit" = 1 ] && set -e
    if [ "$rc" = 0 ]; then
        if [ -e "$tmpdir/$(basename "$out")" ]; then
            if _cache_swap "$tmpdir" "$out"; then CACHE_BUILT=1; else rc=1; fi
        else
            _cache_say "ERROR: $*: wrote nothing to \$CACHE_TMP for $out"
            rc=1
        fi
    fi
    rm -rf "$tmpdir"
    cache_unlock "$out"
    return "$rc"
}

cache_publish() {
    local src=$1 out=$2 tmpdir rc=0
    mkdir -p "$(dirname "$out")"
    cache_lock "$out" || return 1
    tmpdir=$(_cache_tmpdir "$out") || { cache_unlock "$out"; return 1; }
    if ! { mv -T "$src" "$tmpdir/$(basename "$out")" && _cache_swap "$tmpdir" "$out"; }; then rc=1; fi
    rm -rf "$tmpdir"
    cache_unlock "$out"
    return "$rc"
}

# _place_tmp DEST: an unused name beside DEST.
_place_tmp() { mktemp -u "$(dirname "$1")/.$(basename "$1").tmp.XXXXXX"; }

place_file() {
    local tmp
    [ "$2" -ef "$1" ] && [ ! -L "$2" ] && return 0  # the same file already (mv refuses to rename onto it)
    tmp=$(_place_tmp "$2")
    if ! { { ln "$1" "$tmp" 2>/dev/null || cp -f "$1" "$tmp"; } && chmod +x "$tmp"; }; then rm -f "$tmp"; return 1; fi
    if ! mv -f -T "$tmp" "$2" 2>/dev/null; then
        # Another run of this clone placed the same file meanwhile: fine. Anything else: say why.
        [ "$tmp" -ef "$2" ] || mv -f -T "$tmp" "$2" || { rm -f "$tmp"; return 1; }
        rm -f "$tmp"
    fi
}

place_copy() {
    local tmp
    tmp=$(_place_tmp "$2")
    if ! { install -m 0755 "$1" "$tmp" && mv -f -T "$tmp" "$2"; }; then rm -f "$tmp"; return 1; fi
}

place_link() {
    local tmp
    tmp=$(_place_tmp "$2")
    if ! { ln -s "$1" "$tmp" && mv -f -T "$tmp" "$2"; }; then rm -f "$tmp"; return 1; fi
}
