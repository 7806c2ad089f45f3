# Shared by scripts/app.sh and scripts/test.sh (sourced, not run): find Python 3.11+, make .venv,
# and pip-install a requirements file only when it (or a file it includes) changed since last time.
# shellcheck shell=bash

say() { printf '\033[1m[tfviz]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[tfviz] ERROR:\033[0m %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when we are root, through sudo when it exists, else fail (rc 1).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then
        if [ -t 0 ]; then sudo "$@"; else sudo -n "$@"; fi
    else return 1
    fi
}

# apt-get as root that waits for another apt/dpkg instead of failing on "Could not get lock" (a
# shared or freshly booted machine: unattended upgrades, another install): apt's own lock timeout,
# and a retry while a lock is still held, up to TFVIZ_APT_WAIT_S seconds (default 900).
apt_get() {
    local wait_s="${TFVIZ_APT_WAIT_S:-900}" log rc
    local deadline=$((SECONDS + wait_s))
    log="$(mktemp)"
    while :; do
        as_root env DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$wait_s" "$@" 2>&1 \
            | tee "$log" >&2
        rc=${PIPESTATUS[0]}
        if [ "$rc" -eq 0 ] || ! grep -qiE "could not get lock|unable to acquire the dpkg" "$log" \
            || [ "$SECONDS" -ge "$deadline" ]; then
            rm -f "$log"; return "$rc"
        fi
        say "apt is busy (another apt or dpkg holds its lock); waiting for it"
        sleep "${TFVIZ_APT_RETRY_S:-5}"
    done
}

is_py311() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }

find_python() {
    local c
    for c in ${PYTHON:-} python3 python3.13 python3.12 python3.11; do
        if command -v "$c" >/dev/null 2>&1 && is_py311 "$c"; then echo "$c"; return 0; fi
    done
    die "Python 3.11 or newer is needed (found: $(python3 --version 2>&1 || echo none)). Set PYTHON=/path/to/python3.11 to choose one."
}

ensure_venv() {
    if [ -x .venv/bin/python ] && is_py311 .venv/bin/python; then return 0; fi
    local py; py="$(find_python)"
    [ -e .venv ] && { say "Replacing unusable .venv"; rm -rf .venv; }
    say "Creating .venv with $("$py" --version 2>&1)"
    if ! "$py" -m venv .venv; then
        rm -rf .venv
        # Debian/Ubuntu ship venv support separately (python3-venv / python3.X-venv).
        local ver; ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        if command -v apt-get >/dev/null 2>&1; then
            say "python -m venv failed; installing python$ver-venv with apt-get"
            apt_get install -y "python$ver-venv" python3-venv \
                || { apt_get update && apt_get install -y "python$ver-venv"; } \
                || die "could not install python$ver-venv; install it, then run this again"
            "$py" -m venv .venv || { rm -rf .venv; die "python -m venv failed"; }
        else
            die "python -m venv failed; install Python's venv module, then run this again"
        fi
    fi
}

# Hash of the given files' contents (a requirements file and whatever it includes).
files_hash() { .venv/bin/python -c 'import hashlib, sys
h = hashlib.sha256()
for p in sys.argv[1:]:
    h.update(p.encode() + b"\0" + open(p, "rb").read() + b"\0")
print(h.hexdigest())' "$@"; }

# ensure_requirements NAME REQFILE [OTHER FILES IT INCLUDES...]
# Installs REQFILE unless .venv/.tfviz-NAME.sha256 already records the same hash. Any stamp whose
# hash matches counts ("dev" includes "runtime"), so test.sh's install also satisfies app.sh.
ensure_requirements() {
    local name="$1"; shift
    local req="$1"
    local want; want="$(files_hash "$@")"
    local stamp=".venv/.tfviz-$name.sha256"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
    say "Installing $req into .venv (first run or $req changed; this can take a few minutes)"
    .venv/bin/python -m pip install -q -r "$req" || die "pip install -r $req failed"
    echo "$want" > "$stamp"
}
