#!/bin/sh
# The module layering (docs/design.md "Module layering", STYLE.md "Shape"):
# every `#include "shadowsync/X.h"` of src/ (and every "X.h" one module
# header includes of another) points down the layers, lowest first:
#   core < rpc < reader < ckpt < embps, shadow, syncps, gpu < trainer, export < main
# A module may include its own header and those below it; the modules of one
# layer include none of each other's, except gpu's of shadow's (its NCCL
# all-reduce is one of shadow's collectives, struct collective). A private
# header ("../X/...") stays inside its folder. Fails naming the file, its
# line and the include; a planted upward include must be caught too.
. tests/lib.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# layers ROOT: every include of ROOT's src/ and include/shadowsync/ that
# breaks the layering, one "FILE:LINE: #include ... (why)" line each
layers() {
    (cd "$1" && for f in src/*/*.c src/*/*.h src/*/*.cu src/main.c include/shadowsync/*.h; do
        [ -f "$f" ] && grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" /dev/null
    done | awk '
    BEGIN {
        n = split("core:0 rpc:1 reader:2 ckpt:3 embps:4 shadow:4 syncps:4 gpu:4 trainer:5 export:5 main:6", kv, " ")
        for (i = 1; i <= n; i++) { split(kv[i], p, ":"); level[p[1]] = p[2] }
        allowed["gpu>shadow"] = 1   # gpu.h: collective_nccl is one of shadow.h'"'"'s collectives
    }
    {
        split($0, a, ":"); file = a[1]; line = a[2]
        inc = $0; sub(/^[^:]*:[^:]*:[[:space:]]*/, "", inc)
        name = inc; sub(/^[^"]*"/, "", name); sub(/".*$/, "", name)
        # the including module: src/M/..., src/main.c, include/shadowsync/M.h
        if (file == "src/main.c") from = "main"
        else if (file ~ /^include\/shadowsync\//) { from = file; sub(/^include\/shadowsync\//, "", from); sub(/\.h$/, "", from) }
        else { from = file; sub(/^src\//, "", from); sub(/\/.*$/, "", from) }
        to = ""; private = 0
        if (name ~ /^shadowsync\/[a-z_]+\.h$/) { to = name; sub(/^shadowsync\//, "", to); sub(/\.h$/, "", to) }
        else if (name ~ /^\.\.\//) { to = name; sub(/^\.\.\//, "", to); sub(/\/.*$/, "", to); private = 1 }
        else if (file ~ /^include\/shadowsync\// && name ~ /^[a-z_]+\.h$/) {
            to = name; sub(/\.h$/, "", to)
            if (system("test -f include/shadowsync/" name) != 0) to = ""   # generated Thrift headers
        }
        if (to == "" || to == from) next
        why = ""
        if (!(from in level)) why = "module " from " has no layer here"
        else if (!(to in level)) why = "shadowsync/" to ".h belongs to no layer here"
        else if (private) why = "another module'"'"'s private header"
        else if (level[to] > level[from]) why = to " is above " from
        else if (level[to] == level[from] && !((from ">" to) in allowed)) why = to " and " from " share a layer"
        if (why != "") printf "%s:%s: %s (%s)\n", file, line, inc, why
    }')
}

layers . > "$T/repo.txt"
check "no module includes the header of one above it, or of another on its layer ($(wc -l < "$T/repo.txt") found$(head -3 "$T/repo.txt" | sed 's/^/; /' | tr '\n' ' '))" \
    test ! -s "$T/repo.txt"

# the check itself: an upward include, a sideways one and another folder's
# private header, planted in a copy of the tree, are each named by file and line
mkdir -p "$T/tree"
cp -r src include "$T/tree/"
printf '#include "shadowsync/trainer.h"\n' >> "$T/tree/src/embps/hot.c"
printf '#include "shadowsync/syncps.h"\n' >> "$T/tree/src/shadow/algos.c"
printf '#include "../reader/internal.h"\n' >> "$T/tree/src/trainer/feed.c"
printf '#include "trainer.h"\n' >> "$T/tree/include/shadowsync/core.h"
layers "$T/tree" > "$T/planted.txt"
hot=$(wc -l < src/embps/hot.c); algos=$(wc -l < src/shadow/algos.c)
feed=$(wc -l < src/trainer/feed.c); core=$(wc -l < include/shadowsync/core.h)
check "the check names each planted include (upward, sideways, another folder's private header, in a module header) by file and line" \
    sh -c "[ \$(wc -l < $T/planted.txt) = 4 ] &&
        grep -q '^src/embps/hot.c:$((hot + 1)): #include \"shadowsync/trainer.h\" (trainer is above embps)' $T/planted.txt &&
        grep -q '^src/shadow/algos.c:$((algos + 1)): #include \"shadowsync/syncps.h\" (syncps and shadow share a layer)' $T/planted.txt &&
        grep -q '^src/trainer/feed.c:$((feed + 1)): #include \"../reader/internal.h\" (another module.s private header)' $T/planted.txt &&
        grep -q '^include/shadowsync/core.h:$((core + 1)): #include \"trainer.h\" (trainer is above core)' $T/planted.txt"
