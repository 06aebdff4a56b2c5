// Scores a data file with a graph of `shadowsync export` in ONNX Runtime
// (npm's onnxruntime-node, tools/install-onnxruntime), the raw lines turned
// into the graph's inputs by the rules of the JSON beside it alone
// (docs/export.md), as a server would:
//   node tests/onnx_score.js MODEL.onnx DATA OUT [BATCH]
// OUT gets a probability per data line past the header, "%.9g", in the
// input's order; a line the rules refuse gets an empty line (as `shadowsync
// eval --predictions` writes). ORT_DIR: where the runtime is installed
// (default .deps/onnxruntime).
'use strict';
const fs = require('fs');
const path = require('path');
const ortDir = process.env.ORT_DIR || path.join(__dirname, '..', '.deps', 'onnxruntime');
const ort = require(path.resolve(ortDir, 'node_modules', 'onnxruntime-node'));

const [model, dataPath, outPath, batchArg] = process.argv.slice(2);
if (!outPath) {
    console.error('usage: node tests/onnx_score.js MODEL.onnx DATA OUT [BATCH]');
    process.exit(2);
}
const prep = JSON.parse(fs.readFileSync(model + '.json', 'utf8'));
const BATCH = parseInt(batchArg || '1024', 10);
const MASK = (1n << 64n) - 1n;
const tables = prep.categorical.tables;
const rows = tables.map((t) => BigInt(t.rows));

function fnv1a(bytes) {
    let h = 0xcbf29ce484222325n;
    for (const b of bytes) h = ((h ^ BigInt(b)) * 0x100000001b3n) & MASK;
    return h;
}

// a token's id by the JSON's encoding ('' is the empty field's id)
function tokenId(tok) {
    if (tok === '') return BigInt(prep.categorical.empty);
    switch (prep.categorical.encoding) {
    case 'hex':
        if (!/^[0-9a-fA-F]{1,16}$/.test(tok)) throw new Error('bad hex token');
        return BigInt('0x' + tok);
    case 'dec': {
        const s = tok.replace(/^ +| +$/g, '');
        if (!/^[+-]?[0-9]+$/.test(s)) throw new Error('bad decimal id');
        const v = BigInt(s);
        if (v > MASK || v < -MASK) throw new Error('decimal id out of range');
        return v & MASK; // two's complement of a negative one
    }
    case 'hash':
        return fnv1a(Buffer.from(tok, 'latin1'));
    default:
        throw new Error('unknown encoding ' + prep.categorical.encoding);
    }
}

function denseValue(s) {
    if (s === '') return prep.dense.missing;
    if (!/^ *[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)? *$/.test(s))
        throw new Error('bad dense value');
    const v = Math.fround(parseFloat(s));
    if (!isFinite(v)) throw new Error('dense value out of range');
    return v;
}

// one line into its dense values and each table's ids (mod the rows)
function parse(line) {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    const f = line.split(prep.separator);
    if (prep.fields_rule === 'exactly' ? f.length !== prep.fields : f.length < prep.fields)
        throw new Error('fields');
    const dense = prep.dense.columns.map((c) => (c < 0 ? 0 : denseValue(f[c]))); // -1: none
    const bags = tables.map((t, k) => {
        const field = f[t.column];
        let ids;
        if (t.multihot && field !== '') {
            ids = field.split(prep.categorical.multihot_separator).filter((x) => x !== '')
                .map(tokenId);
            if (ids.length === 0) ids = [0n];
        } else {
            ids = [tokenId(field)];
        }
        return ids.map((id) => id % rows[k]);
    });
    return { dense, bags };
}

// a libSVM / libFM line: the label first, then [field:]index:value tokens
function parseLibsvm(line) {
    const tok = line.split('#')[0].split(/[ \t]+/).filter((x) => x !== '');
    if (tok.length === 0 || !/^[+-]?[0-9.]+$/.test(tok[0]) || ![0, 1, -1].includes(Number(tok[0])))
        throw new Error('label');
    const field = new Map();
    prep.dense.fields.forEach((f, j) => { if (f >= 0) field.set(f, { dense: j }); });
    tables.forEach((t, k) => field.set(t.field, { table: k }));
    const dense = prep.dense.fields.map(() => 0);
    const ids = tables.map(() => []), wts = tables.map(() => []);
    const seen = new Set();
    for (const x of tok.slice(1)) {
        const p = x.split(':');
        if (p[0] === 'qid') continue;
        if (p.length < 2 || p.length > 3) throw new Error('feature');
        let f, idx;
        const val = Math.fround(Number(p[p.length - 1]));
        if (!/^[0-9]+$/.test(p[p.length - 2]) || Number.isNaN(val)) throw new Error('feature');
        idx = BigInt(p[p.length - 2]);
        if (p.length === 3) {
            f = Number(p[0]);
        } else {
            const r = (prep.field_ranges || []).findIndex(([lo, hi]) =>
                idx >= BigInt(lo) && idx <= BigInt(hi));
            if (r < 0) throw new Error('no field');
            f = r;
        }
        const role = field.get(f);
        if (!role) continue;
        if (role.dense !== undefined) {
            if (seen.has(f)) throw new Error('dense twice');
            seen.add(f);
            dense[role.dense] = val;
        } else {
            ids[role.table].push(idx);
            wts[role.table].push(val);
        }
    }
    const bags = ids.map((b, k) => (b.length ? b : [0n]).map((id) => id % rows[k]));
    return { dense, bags, wts: wts.map((w) => (w.length ? w : [1])) };
}

async function main() {
    const session = await ort.InferenceSession.create(model);
    const text = fs.readFileSync(dataPath, 'latin1');
    let lines = text.split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    lines = lines.slice(prep.header_lines);
    const out = new Array(lines.length).fill('');
    const nd = prep.dense.count, T = tables.length;
    for (let at = 0; at < lines.length; at += BATCH) {
        const ex = [], where = [];
        for (let i = at; i < Math.min(at + BATCH, lines.length); i++) {
            try {
                ex.push(prep.data_format === 'libsvm' ? parseLibsvm(lines[i]) : parse(lines[i]));
                where.push(i);
            } catch (e) { /* a bad line: an empty prediction */ }
        }
        if (ex.length === 0) continue;
        const N = ex.length;
        const dense = new Float32Array(N * nd);
        ex.forEach((x, i) => dense.set(x.dense, i * nd));
        const feeds = { [prep.dense.input]: new ort.Tensor('float32', dense, [N, nd]) };
        for (let t = 0; t < T; t++) {
            const K = ex.reduce((s, x) => s + x.bags[t].length, 0);
            const ids = new BigInt64Array(K), bags = new BigInt64Array(K);
            let k = 0;
            ex.forEach((x, i) => {
                for (const id of x.bags[t]) {
                    ids[k] = id;
                    bags[k++] = BigInt(i);
                }
            });
            feeds[tables[t].ids_input] = new ort.Tensor('int64', ids, [K]);
            feeds[tables[t].bags_input] = new ort.Tensor('int64', bags, [K]);
            if (tables[t].wts_input) {
                const w = new Float32Array(K);
                let q = 0;
                ex.forEach((x) => x.wts[t].forEach((v) => { w[q++] = v; }));
                feeds[tables[t].wts_input] = new ort.Tensor('float32', w, [K]);
            }
        }
        const res = await session.run(feeds);
        const p = res[prep.output].data;
        where.forEach((line, i) => { out[line] = p[i].toPrecision(9); });
    }
    fs.writeFileSync(outPath, out.map((s) => s + '\n').join(''));
}

main().catch((e) => {
    console.error('onnx_score: ' + (e && e.message ? e.message : e));
    process.exit(1);
});
