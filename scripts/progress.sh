# ticking LABEL COMMAND...: run COMMAND; while it runs, and only when the script's stderr is a terminal, keep
# one line there saying how long it has been going ("[tools] pulumi v3.259.0: building, 3m05s"), rewritten every
# 5 s and cleared at the end. Quiet in CI and in logs. Sourced by scripts/tools.sh and scripts/haproxy.sh.
#
# The caller usually sends the command's output to a log (ticking ... >log 2>&1), so the line goes to fd 3: the
# stderr the script had when it sourced this file.
exec 3>&2

ticking() {
    local label=$1; shift
    if [ ! -t 3 ]; then
        "$@" 3>&-
        return
    fi
    local start ticker rc
    start=$(date +%s)
    (
        while sleep "${TICK_SECONDS:-5}"; do
            s=$(( $(date +%s) - start ))
            printf '\r\033[K[tools] %s: building, %dm%02ds' "$label" $((s / 60)) $((s % 60)) >&3
        done
    ) &
    ticker=$!
    "$@" 3>&-
    rc=$?
    kill "$ticker" 2>/dev/null
    wait "$ticker" 2>/dev/null
    printf '\r\033[K' >&3
    return "$rc"
}
