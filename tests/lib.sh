# Helpers the end-to-end scripts source (`. tests/lib.sh`, from the repo
# root): PASS/FAIL lines for tests/run, and reading metrics.json.
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name" "$*"; fi; }
# json KEY FILE: a number (or a string, unquoted) from metrics.json
json() { sed -n "s/^ *\"$1\": \([^,]*\),*$/\1/p" "$2" | tr -d '"'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0 && a != "") }'; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d < t && d > -t) }'; }
