#!/usr/bin/env bash
# The dynamic-mode suite (tests/dynamic, tests/profile) on each supported torch release.
#
#   tests/compat/run.sh                      every release in RELEASES, one fresh venv at a time
#   tests/compat/run.sh 2.4.1 2.14.1         only these releases
#   tests/compat/run.sh --venv DIR [DIR...]  venvs that already hold a torch (for development):
#                                            each is left untouched; the suite runs in a throwaway
#                                            venv that sees this checkout, then DIR's packages,
#                                            then those of $DEPS (default: ./.venv, a venv with
#                                            ckptlint's test dependencies), nothing installed
#
# A fresh venv gets `pip install --no-cache-dir torch==X` (a CUDA build from the registry runs
# on CPU; about 1 minute and 4-5 GB, `numpy<2` next to torch 2.4), then ckptlint (editable) with
# its test dependencies; never torchvision (its wheels break next to a CPU torch). The venv is
# deleted after its run, so the disk holds one release at a time. Prints one line per release
# and a matrix at the end; exits 1 if a release failed a test or could not be installed.
# CI runs it after the default suite when CKPTLINT_COMPAT=1 (.ci/run).
set -euo pipefail

RELEASES=(2.4.1 2.8.0 2.11.0 2.13.0 2.14.1)
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
DEPS="${DEPS:-$ROOT/.venv}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ckptlint-compat.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"

venvs=()
if [ "${1:-}" = "--venv" ]; then
    shift
    venvs=("$@")
    [ ${#venvs[@]} -gt 0 ] || { echo "usage: $0 --venv DIR [DIR...]" >&2; exit 2; }
elif [ $# -gt 0 ]; then
    RELEASES=("$@")
fi

say() { printf 'compat: %s\n' "$*" >&2; }

install_ckptlint() {   # $1: venv
    "$1/bin/pip" install -q --no-cache-dir -e "$ROOT[test]"
}

purelib() {            # $1: venv; its site-packages
    "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

layer_venv() {         # $1: venv holding torch, $2: new venv; .pth files order the layers
    "$PYTHON" -m venv --without-pip "$2" || return 1
    local site
    site="$(purelib "$2")"
    echo "$ROOT" > "$site/00-checkout.pth"
    purelib "$1" > "$site/10-torch.pth"
    purelib "$DEPS" > "$site/20-test-deps.pth"
}

build_venv() {         # $1: release, $2: venv
    local extra=()
    case "$1" in 2.4.*) extra=("numpy<2") ;; esac
    "$PYTHON" -m venv "$2" &&
        "$2/bin/pip" install -q --no-cache-dir "torch==$1" "${extra[@]}" &&
        install_ckptlint "$2"
}

run_suite() {          # $1: label, $2: venv; appends "label passed skipped failed" to the matrix
    local xml="$WORK/$1.xml" start=$SECONDS
    set +e
    "$2/bin/python" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$xml" tests/dynamic tests/profile
    set -e
    "$2/bin/python" - "$xml" "$1" "$((SECONDS - start))" >> "$WORK/matrix" <<'PY'
import sys
import xml.etree.ElementTree as ET

path, label, seconds = sys.argv[1:]
try:
    suite = ET.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    n = {k: int(suite.get(k, 0)) for k in ("tests", "skipped", "failures", "errors")}
    failed = n["failures"] + n["errors"]
    print(label, n["tests"] - n["skipped"] - failed, n["skipped"], failed, seconds)
except (OSError, ET.ParseError):
    print(label, "-", "-", "no report", seconds)
PY
}

: > "$WORK/matrix"
if [ ${#venvs[@]} -gt 0 ]; then
    for torch_venv in "${venvs[@]}"; do
        venv="$WORK/layered"
        label="$("$torch_venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" ||
            { say "$torch_venv: no torch"; echo "$torch_venv - - no-torch 0" >> "$WORK/matrix"; continue; }
        say "torch $label from $torch_venv"
        layer_venv "$torch_venv" "$venv"
        run_suite "$label" "$venv"
        rm -rf "$venv"
    done
else
    for release in "${RELEASES[@]}"; do
        venv="$WORK/venv-$release"
        say "building a venv with torch $release"
        if build_venv "$release" "$venv"; then
            run_suite "$release" "$venv"
        else
            say "torch $release could not be installed"
            echo "$release - - install-failed 0" >> "$WORK/matrix"
        fi
        rm -rf "$venv"
    done
fi

printf '\n| torch | passed | skipped | failed | seconds |\n|---|---:|---:|---:|---:|\n'
status=0
while read -r label passed skipped failed seconds; do
    printf '| %s | %s | %s | %s | %s |\n' "$label" "$passed" "$skipped" "$failed" "$seconds"
    [ "$failed" = "0" ] || status=1
done < "$WORK/matrix"
exit $status
