#!/bin/sh
# The ONNX export (docs/export.md): a trained model exported, the graph
# accepted by python3-onnx's checker, and data.eval scored by a real
# runtime (npm's onnxruntime-node, tools/install-onnxruntime), its raw lines
# turned into the graph's inputs by the JSON beside it alone
# (tests/onnx_score.js): every probability within 1e-5 of `shadowsync eval
# --predictions`. Two models: Criteo TSV with hex ids, sum pooling and
# row-wise Adagrad's state in its tables; and a CSV with a header line,
# hashed ids, multi-hot bags, mean pooling, fractional and negative dense
# values and hot rows; and a cluster job's, its tables in the embedding
# PSs' files and its hot rows folded back into them. Then what export
# refuses. And configs/avazu.ini's model (columns by name, no dense
# column), and a libFM model's (weighted bags: a weights input a table). Where npm cannot install the runtime the scoring is skipped,
# saying so; the rest still runs.
BIN=${BIN:-${BUILD:-build}/shadowsync}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG=configs/tiny.ini
PY=/usr/bin/python3   # Debian's, with python3-onnx (not a pyenv one first on PATH)

. tests/lib.sh

ORT=1
if ! sh tools/install-onnxruntime > $T/ort.log 2>&1; then
    ORT=""
    echo "SKIP ONNX Runtime scoring: npm could not install onnxruntime-node ($(tail -1 $T/ort.log))"
fi

# max_abs A B: the largest |a - b| of two prediction files line by line;
# "lines differ" when their lines or empty lines do not pair up
max_abs() {
    paste -d' ' "$1" "$2" | awk -v na="$(wc -l < "$1")" -v nb="$(wc -l < "$2")" '
        NF == 1 || ($1 == "") != ($2 == "") { bad = 1 }
        NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
        END { if (bad || na != nb || n == 0) print "lines differ"; else printf "%.3g\n", m }'
}

# exported NAME [--set ...]: $T/NAME's model exported as $T/NAME.onnx, checked
# and scored on $EVAL against shadowsync eval
exported() {
    name=$1; shift
    $BIN export $CFG --model $T/$name --out $T/$name.onnx $SETS "$@" > $T/$name.export 2>&1
    check "$name: export exits 0, writing the graph, the tables and the JSON" \
        sh -c "test $? = 0 && test -s $T/$name.onnx && test -s $T/$name.onnx.data &&
               test -s $T/$name.onnx.json && ! ls $T/*.tmp > /dev/null 2>&1"
    check "$name: python3-onnx's checker accepts the graph (with its external data, shapes inferred)" \
        $PY -c "import onnx, sys; onnx.checker.check_model(sys.argv[1]);
onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)" $T/$name.onnx
    $BIN eval $CFG --model $T/$name --predictions $T/$name.ref $SETS "$@" > $T/$name.eval 2>&1
    [ -z "$ORT" ] && return
    node tests/onnx_score.js $T/$name.onnx $EVAL $T/$name.ort 1000 > $T/$name.ort.log 2>&1
    rc=$?
    check "$name: ONNX Runtime scores data.eval$(head -c 300 $T/$name.ort.log | sed 's/^/: /')" test $rc = 0
    d=$(max_abs $T/$name.ref $T/$name.ort)
    check "$name: ONNX Runtime's $(grep -c . $T/$name.ort) probabilities match shadowsync eval's: max abs $d <= 1e-5" \
        lt "$d" 0.00001000001
}

# 1. Criteo TSV, hex ids, sum pooling; tables saved with row-wise Adagrad's state
$BIN gen --out $T/d --examples 20000 --eval-examples 3000 --seed 7 --config $CFG > /dev/null 2>&1
EVAL=$T/d/eval.tsv
SETS="--set data.train=$T/d/train.tsv --set data.eval=$EVAL"
$BIN train $CFG $SETS --set output.dir=$T/tsv --set trainer.worker_threads=1 > $T/tsv.log 2>&1
check "Criteo TSV model trains" test $? = 0
exported tsv
J=$T/tsv.onnx.json
check "its JSON: criteo, tab, 40 fields exactly, hex, sum, 26 tables of 1000 rows in columns 14-39" \
    $PY -c "import json, sys; j = json.load(open(sys.argv[1])); c = j['categorical']; t = c['tables']
assert j['data_format'] == 'criteo' and j['separator'] == '\t' and j['fields'] == 40
assert j['fields_rule'] == 'exactly' and j['dense']['columns'] == list(range(1, 14))
assert c['encoding'] == 'hex' and c['pooling'] == 'sum' and len(t) == 26
assert [x['column'] for x in t] == list(range(14, 40)) and {x['rows'] for x in t} == {1000}
assert t[3] == {'ids_input': 'ids_3', 'bags_input': 'bags_3', 'rows': 1000, 'column': 17, 'multihot': False}
assert j['graph'] == 'tsv.onnx' and j['tables_data'] == 'tsv.onnx.data'" $J
check "the tables' data holds 26 x 1000 rows of 8 floats, each table on a page (no optimizer state)" \
    test "$(stat -c %s $T/tsv.onnx.data)" = $((26 * 32768))
check "the export's line names its files" \
    grep -q "^export: $T/tsv.onnx (the graph, .* MB), $T/tsv.onnx.data (26 tables, 0.8 MB), $T/tsv.onnx.json (the preprocessing)" $T/tsv.export
$BIN convert $CFG --in $T/d/eval.tsv --out $T/shards > /dev/null 2>&1
$BIN export $CFG --model $T/tsv --out $T/bin.onnx --set data.eval=$T/shards > $T/bin.export 2>&1
check "data in binary shards: the JSON says so, with no columns (the records hold the ids)" \
    $PY -c "import json, sys; j = json.load(open(sys.argv[1])); t = j['categorical']['tables']
assert j['data_format'] == 'binary' and 'columns' not in j['dense'] and 'separator' not in j
assert 'column' not in t[0] and len(t) == 26" $T/bin.onnx.json

# 2. the tiny cluster job (lib.sh): each table split over 2 embedding PSs'
# files, and hot rows whose values only hot.bin holds (no PS has them)
cluster job sync.algo=ma hot_embeddings.memory_mb=0.05
check "the cluster job with hot rows trains, its PSs saving the tables" \
    sh -c "test $? = 0 && test -s $T/job/model/tables-ps0.bin && test -s $T/job/model/tables-ps1.bin &&
           test -s $T/job/model/hot.bin"
exported job
check "its export folds the hot rows back into the tables" grep -q "hot rows folded in" $T/job.export

# 3. CSV with a header, hashed ids, bags in columns 14-16, mean pooling,
# SGD tables (no state); dense values made fractional, tiny and
# negative in places
$BIN gen --out $T/g --examples 20000 --eval-examples 3000 --seed 8 --config $CFG \
    --set data.multihot_cols=14-16 --set "data.multihot_sep=;" --bag-size 3 > /dev/null 2>&1
for f in train eval; do
    { echo "label,i1,i2,i3,i4,i5,i6,i7,i8,i9,i10,i11,i12,i13,c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16,c17,c18,c19,c20,c21,c22,c23,c24,c25,c26"
      awk -F'\t' -v OFS=, '{ $1 = $1; if ($2 != "") $2 = $2 ".5"; if (NR % 7 == 0) $3 = "1e-9";
                            if (NR % 5 == 0) $4 = "-3"; print }' $T/g/$f.tsv; } > $T/g/$f.csv
done
sed -i '100s/.*/a line that is no example/' $T/g/eval.csv # an empty line in both scores
EVAL=$T/g/eval.csv
SETS="--set data.train=$T/g/train.csv --set data.eval=$EVAL --set data.separator=, --set data.header=1
      --set data.multihot_cols=14-16 --set data.multihot_sep=; --set data.cat_encoding=hash
      --set model.pooling=mean --set optim.emb=sgd --set optim.emb_lr=0.05"
$BIN train $CFG $SETS --set output.dir=$T/bags --set trainer.worker_threads=1 \
    --set hot_embeddings.memory_mb=0.02 > $T/bags.log 2>&1
check "the CSV model (bags, mean, hashed ids, hot rows) trains" \
    sh -c "test $? = 0 && test -s $T/bags/model/hot.bin"
exported bags
check "its JSON: csv, comma, a header line, hash, mean, bags in columns 14-16 separated by ;" \
    $PY -c "import json, sys; j = json.load(open(sys.argv[1])); c = j['categorical']; t = c['tables']
assert j['data_format'] == 'csv' and j['separator'] == ',' and j['header_lines'] == 1
assert j['fields_rule'] == 'at least' and c['encoding'] == 'hash' and c['pooling'] == 'mean'
assert c['multihot_separator'] == ';' and [x['multihot'] for x in t[:4]] == [True, True, True, False]
assert 'FNV-1a' in c['encoding_rule']" $T/bags.onnx.json

# 3b. configs/avazu.ini on Avazu-format CSV: columns by the header's names,
# no dense column (the model's one constant input, column -1 in the JSON)
/usr/bin/python3 tests/avazu_like.py 8000 1 > $T/av_train.csv
/usr/bin/python3 tests/avazu_like.py 1000 2 > $T/av_eval.csv
EVAL=$T/av_eval.csv
AVS="--set data.train=$T/av_train.csv --set data.eval=$EVAL --set model.rows=5000 --set model.top=auto-32-1"
$BIN train configs/avazu.ini $AVS --set output.dir=$T/av > $T/av.log 2>&1
check "the Avazu model trains" test $? = 0
CFG=configs/avazu.ini; SETS=$AVS
exported av
CFG=configs/tiny.ini
check "its JSON: the named columns as numbers, the dense input as column -1" \
    $PY -c "import json, sys; j = json.load(open(sys.argv[1]))
assert j['dense']['columns'] == [-1] and j['categorical']['tables'][0]['column'] == 2
assert j['categorical']['tables'][21]['column'] == 23 and j['header_lines'] == 1" $T/av.onnx.json

# 3c. libFM data with weighted bags (values 0.5, 1, 2; an id twice in a
# bag now and then) and mean pooling: the graph takes each id's weight
cat > $T/fm.py <<'PYEOF'
import sys
for n, line in enumerate(sys.stdin):
    f = line.rstrip('\n').split('\t')
    out = [f[0]] + ['%d:%d:%s' % (j, j, f[1 + j]) for j in range(13) if f[1 + j] != '']
    for t in range(26):
        if f[14 + t] != '':
            v = int(f[14 + t], 16)
            out.append('%d:%d:%s' % (13 + t, v, ('0.5', '1', '2')[v % 3]))
            if (n + t) % 11 == 0:
                out.append('%d:%d:0.25' % (13 + t, v + 1))
    print(' '.join(out))
PYEOF
for f in train eval; do $PY $T/fm.py < $T/d/$f.tsv > $T/d/$f.fm; done
EVAL=$T/d/eval.fm
SETS="--set data.format=libsvm --set data.dense_cols=0-12 --set data.cat_cols=13-38
      --set data.train=$T/d/train.fm --set data.eval=$EVAL --set model.pooling=mean"
$BIN train $CFG $SETS --set output.dir=$T/fm --set trainer.worker_threads=1 > $T/fm.log 2>&1
check "the libFM model (weighted bags, mean pooling) trains" test $? = 0
exported fm
check "its JSON: libsvm, libFM's fields, each table's weights input" \
    $PY -c "import json, sys; j = json.load(open(sys.argv[1])); t = j['categorical']['tables']
assert j['data_format'] == 'libsvm' and j['field_rule'] == \"libFM's field:index:value\"
assert j['dense']['fields'] == list(range(13)) and t[0]['field'] == 13 and t[0]['wts_input'] == 'wts_0'" $T/fm.onnx.json
SETS="--set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv"

# 4. what export refuses, naming why, and leaving no file behind
SETS="--set data.train=$T/d/train.tsv --set data.eval=$T/d/eval.tsv"
$BIN export $CFG --model $T/tsv --out $T/bad.onnx $SETS --set model.rows=999 > $T/bad1.log 2>&1
check "other model.rows: refused, naming the table and the key, no file left" \
    sh -c "test $? != 0 && grep -q 'table 0 was saved with 1000 rows, the config.s has 999 (model.rows' $T/bad1.log &&
           ! ls $T/bad.onnx* > /dev/null 2>&1"
$BIN export $CFG --model $T/tsv --out $T/bad.onnx $SETS --set model.pooling=mean > $T/bad2.log 2>&1
check "other pooling: refused as eval refuses it" \
    sh -c "test $? != 0 && grep -q 'trained with model.pooling = sum' $T/bad2.log"
$BIN export $CFG --model $T/nothing --out $T/bad.onnx $SETS > $T/bad3.log 2>&1
check "no model there: refused, naming the directory" \
    sh -c "test $? != 0 && grep -q -- '--model $T/nothing: no dense.bin there or in its model/' $T/bad3.log"
$BIN export $CFG --model $T/tsv --out $T/no/such/dir/x.onnx $SETS > $T/bad4.log 2>&1
check "an unwritable --out: refused, naming the file" \
    sh -c "test $? != 0 && grep -q 'x.onnx.data.tmp: cannot write' $T/bad4.log"
$BIN export $CFG --model $T/tsv $SETS > $T/bad5.log 2>&1
check "no --out: a usage error (2)" sh -c "test $? = 2 && grep -q 'export needs CONFIG, --model DIR and --out FILE.onnx' $T/bad5.log"
