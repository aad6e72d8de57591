/*
 * The producer's native RecordBatch v2 record encoder (lakelog.logstore._batchbuild).
 *
 * encode_records(base_timestamp, records) -> bytes
 *   records: a sequence of (timestamp: int, key: bytes|None, value: bytes|None,
 *            headers: sequence of (name: str, value: bytes|None)); record i gets offset delta i.
 *   Returns the records section of a Kafka RecordBatch v2 (magic 2), uncompressed: for each record
 *     varint length | int8 attributes (0) | varint timestamp delta | varint offset delta |
 *     varint key length (-1 = null) | key | varint value length | value |
 *     varint header count | (varint name length | name UTF-8 | varint value length | value)*
 *   where every varint is zig-zag encoded (Kafka's ByteUtils.writeVarint / writeVarlong).
 *
 * encode_columns(base_timestamp, timestamps, keys, values, headers) -> bytes
 *   The same records section from columns, for callers that hold records as lists (the node's JSON
 *   produce path, the producer's batches): `values` is a sequence of bytes|None (its length is the
 *   record count); `timestamps` one int for every record or a sequence of ints; `keys` None (every
 *   key null) or a sequence of bytes|None; `headers` None (no headers) or a sequence of header
 *   sequences as in encode_records. No tuple per record is built by the caller. The size is
 *   computed first, so the result is allocated once and each value copied once. An optional 6th
 *   argument `reserve` > 0 returns a bytearray whose first `reserve` bytes are zero (the caller
 *   writes the batch header there: the batch needs no second copy).
 *
 * murmur2(data) / partition_for_key(key, partitions): Kafka's default partitioner (the Java client's
 *   Utils.murmur2, seed 0x9747b28c), as lakelog.ingest_api.partitioner's pure-Python reference.
 *
 * decode_records(records, base_offset, base_timestamp, log_append_time, min_offset, topic, partition,
 *                message_type) -> list
 *   The inverse, for the consumer: walks an (inflated) records section of the layout above and
 *   returns one `message_type` (a tuple subclass of 7 fields, client/consumer.py's Message) per record
 *   whose offset (base_offset + offset delta) is >= min_offset:
 *     (topic, partition, offset, key bytes|None, value bytes|None, [(name str, value bytes|None)],
 *      timestamp)   -- timestamp = log_append_time when it is >= 0, else base_timestamp + delta.
 *   A malformed record (a varint or a length running past its record or the buffer, a record whose
 *   fields do not fill its length, a header name that is not UTF-8) raises ValueError naming the
 *   record's index and byte position.
 *
 * The pure-Python references are lakelog.logstore.record_batch.encode_record and RecordBatch.records;
 * tests check that both paths give the same bytes and the same records. The batch header, compression and CRC-32C are added in Python
 * (client/batching.py, the producer). Pure function: no state, the GIL held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        cap *= 2;
    }
    char *nb = PyMem_Realloc(b->buf, (size_t)cap);
    if (!nb) { PyErr_NoMemory(); return -1; }
    b->buf = nb;
    b->cap = cap;
    return 0;
}

/* Zig-zag varint of a signed 64-bit value; at most 10 bytes. */
static Py_ssize_t varint(char *out, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 0;
    while (z >= 0x80) {
        out[n++] = (char)((z & 0x7f) | 0x80);
        z >>= 7;
    }
    out[n++] = (char)z;
    return n;
}

static Py_ssize_t varint_size(int64_t v) {
    char tmp[10];
    return varint(tmp, v);
}

/* Length (or -1 for None) and data of a bytes-like or None field. */
static int bytes_field(PyObject *o, const char **data, Py_ssize_t *len, const char *what) {
    if (o == Py_None) { *data = NULL; *len = -1; return 0; }
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None", what);
        return -1;
    }
    *data = PyBytes_AS_STRING(o);
    *len = PyBytes_GET_SIZE(o);
    return 0;
}

static int put_field(Buf *b, const char *data, Py_ssize_t len) {
    if (buf_reserve(b, 10 + (len > 0 ? len : 0)) < 0) return -1;
    b->len += varint(b->buf + b->len, (int64_t)len);
    if (len > 0) { memcpy(b->buf + b->len, data, (size_t)len); b->len += len; }
    return 0;
}

static PyObject *encode_records(PyObject *self, PyObject *args) {
    long long base_ts;
    PyObject *records;
    if (!PyArg_ParseTuple(args, "LO", &base_ts, &records)) return NULL;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Buf out = {NULL, 0, 0};
    Buf rec = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *ts_o, *key_o, *value_o, *headers_o;
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 4) {
            PyErr_SetString(PyExc_TypeError, "each record must be (timestamp, key, value, headers)");
            goto fail;
        }
        ts_o = PyTuple_GET_ITEM(r, 0);
        key_o = PyTuple_GET_ITEM(r, 1);
        value_o = PyTuple_GET_ITEM(r, 2);
        headers_o = PyTuple_GET_ITEM(r, 3);
        long long ts = PyLong_AsLongLong(ts_o);
        if (ts == -1 && PyErr_Occurred()) goto fail;
        const char *kd, *vd;
        Py_ssize_t kl, vl;
        if (bytes_field(key_o, &kd, &kl, "key") < 0 || bytes_field(value_o, &vd, &vl, "value") < 0) goto fail;
        rec.len = 0;
        if (buf_reserve(&rec, 21) < 0) goto fail;
        rec.buf[rec.len++] = 0; /* attributes */
        rec.len += varint(rec.buf + rec.len, (int64_t)(ts - base_ts));
        rec.len += varint(rec.buf + rec.len, (int64_t)i);
        if (put_field(&rec, kd, kl) < 0 || put_field(&rec, vd, vl) < 0) goto fail;
        PyObject *hseq = PySequence_Fast(headers_o, "headers must be a sequence");
        if (!hseq) goto fail;
        Py_ssize_t hn = PySequence_Fast_GET_SIZE(hseq);
        if (buf_reserve(&rec, 10) < 0) { Py_DECREF(hseq); goto fail; }
        rec.len += varint(rec.buf + rec.len, (int64_t)hn);
        for (Py_ssize_t j = 0; j < hn; j++) {
            PyObject *h = PySequence_Fast_GET_ITEM(hseq, j);
            if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(h, 0))) {
                PyErr_SetString(PyExc_TypeError, "each header must be (name: str, value: bytes | None)");
                Py_DECREF(hseq);
                goto fail;
            }
            Py_ssize_t nl;
            const char *nd = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &nl);
            const char *hd;
            Py_ssize_t hl;
            if (!nd || bytes_field(PyTuple_GET_ITEM(h, 1), &hd, &hl, "header value") < 0
                || put_field(&rec, nd, nl) < 0 || put_field(&rec, hd, hl) < 0) {
                Py_DECREF(hseq);
                goto fail;
            }
        }
        Py_DECREF(hseq);
        if (buf_reserve(&out, 10 + rec.len) < 0) goto fail;
        out.len += varint(out.buf + out.len, (int64_t)rec.len);
        memcpy(out.buf + out.len, rec.buf, (size_t)rec.len);
        out.len += rec.len;
    }
    Py_DECREF(seq);
    PyObject *result = PyBytes_FromStringAndSize(out.buf ? out.buf : "", out.len);
    PyMem_Free(out.buf);
    PyMem_Free(rec.buf);
    return result;
fail:
    Py_DECREF(seq);
    PyMem_Free(out.buf);
    PyMem_Free(rec.buf);
    return NULL;
}


/* The fields of one record, checked; `hseq` a new reference (or NULL for no headers). */
typedef struct {
    const char *kd, *vd;
    Py_ssize_t kl, vl;
    int64_t ts_delta;
    PyObject *hseq;
    Py_ssize_t body; /* the record's length without its own varint length prefix */
} Fields;

static int record_fields(Fields *f, int64_t ts_delta, Py_ssize_t i, PyObject *key_o, PyObject *value_o,
                         PyObject *headers_o) {
    f->hseq = NULL;
    if (bytes_field(key_o, &f->kd, &f->kl, "key") < 0 || bytes_field(value_o, &f->vd, &f->vl, "value") < 0) return -1;
    f->ts_delta = ts_delta;
    Py_ssize_t body = 1 + varint_size(ts_delta) + varint_size((int64_t)i)
                      + varint_size((int64_t)f->kl) + (f->kl > 0 ? f->kl : 0)
                      + varint_size((int64_t)f->vl) + (f->vl > 0 ? f->vl : 0);
    if (headers_o == NULL) {
        f->body = body + 1;
        return 0;
    }
    PyObject *hseq = PySequence_Fast(headers_o, "headers must be a sequence");
    if (!hseq) return -1;
    Py_ssize_t hn = PySequence_Fast_GET_SIZE(hseq);
    body += varint_size((int64_t)hn);
    for (Py_ssize_t j = 0; j < hn; j++) {
        PyObject *h = PySequence_Fast_GET_ITEM(hseq, j);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(h, 0))) {
            PyErr_SetString(PyExc_TypeError, "each header must be (name: str, value: bytes | None)");
            Py_DECREF(hseq);
            return -1;
        }
        Py_ssize_t nl, hl = -1;
        const char *hd;
        if (!PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &nl)
            || bytes_field(PyTuple_GET_ITEM(h, 1), &hd, &hl, "header value") < 0) {
            Py_DECREF(hseq);
            return -1;
        }
        body += varint_size((int64_t)nl) + nl + varint_size((int64_t)hl) + (hl > 0 ? hl : 0);
    }
    f->hseq = hseq;
    f->body = body;
    return 0;
}

static char *write_field(char *out, const char *data, Py_ssize_t len) {
    out += varint(out, (int64_t)len);
    if (len > 0) { memcpy(out, data, (size_t)len); out += len; }
    return out;
}

/* Record i (length prefix included) at `out`; returns the end. Consumes f->hseq. */
static char *write_record(char *out, Fields *f, Py_ssize_t i) {
    out += varint(out, (int64_t)f->body);
    *out++ = 0; /* attributes */
    out += varint(out, f->ts_delta);
    out += varint(out, (int64_t)i);
    out = write_field(out, f->kd, f->kl);
    out = write_field(out, f->vd, f->vl);
    if (f->hseq == NULL) {
        *out++ = 0; /* varint(0): no headers */
        return out;
    }
    Py_ssize_t hn = PySequence_Fast_GET_SIZE(f->hseq);
    out += varint(out, (int64_t)hn);
    for (Py_ssize_t j = 0; j < hn; j++) {
        PyObject *h = PySequence_Fast_GET_ITEM(f->hseq, j);
        Py_ssize_t nl, hl = -1;
        const char *nd = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &nl), *hd = NULL; /* checked by record_fields */
        bytes_field(PyTuple_GET_ITEM(h, 1), &hd, &hl, "header value");
        out = write_field(out, nd, nl);
        out = write_field(out, hd, hl);
    }
    Py_CLEAR(f->hseq);
    return out;
}

/* Two passes: the exact size first (so the result is allocated once, at its size, and every
 * value copied once), then the bytes. With `reserve` > 0 the result is a bytearray that starts
 * with `reserve` zero bytes (room for the batch header, filled by the caller). */
static PyObject *encode_columns(PyObject *self, PyObject *args) {
    long long base_ts;
    Py_ssize_t reserve = 0;
    PyObject *ts_arg, *keys_arg, *values_arg, *headers_arg;
    if (!PyArg_ParseTuple(args, "LOOOO|n", &base_ts, &ts_arg, &keys_arg, &values_arg, &headers_arg, &reserve))
        return NULL;
    if (reserve < 0) { PyErr_SetString(PyExc_ValueError, "reserve must be >= 0"); return NULL; }
    PyObject *values = NULL, *keys = NULL, *tss = NULL, *hdrs = NULL, *result = NULL;
    Fields *fields = NULL;
    Py_ssize_t n = 0, done = 0;
    long long one_ts = 0;
    values = PySequence_Fast(values_arg, "values must be a sequence");
    if (!values) return NULL;
    n = PySequence_Fast_GET_SIZE(values);
    if (PyLong_Check(ts_arg)) {
        one_ts = PyLong_AsLongLong(ts_arg);
        if (one_ts == -1 && PyErr_Occurred()) goto end;
    } else {
        tss = PySequence_Fast(ts_arg, "timestamps must be an int or a sequence");
        if (!tss) goto end;
        if (PySequence_Fast_GET_SIZE(tss) != n) { PyErr_SetString(PyExc_ValueError, "timestamps and values differ in length"); goto end; }
    }
    if (keys_arg != Py_None) {
        keys = PySequence_Fast(keys_arg, "keys must be None or a sequence");
        if (!keys) goto end;
        if (PySequence_Fast_GET_SIZE(keys) != n) { PyErr_SetString(PyExc_ValueError, "keys and values differ in length"); goto end; }
    }
    if (headers_arg != Py_None) {
        hdrs = PySequence_Fast(headers_arg, "headers must be None or a sequence");
        if (!hdrs) goto end;
        if (PySequence_Fast_GET_SIZE(hdrs) != n) { PyErr_SetString(PyExc_ValueError, "headers and values differ in length"); goto end; }
    }
    fields = PyMem_Malloc(sizeof(Fields) * (size_t)(n > 0 ? n : 1));
    if (!fields) { PyErr_NoMemory(); goto end; }
    Py_ssize_t total = reserve;
    for (; done < n; done++) {
        long long ts = one_ts;
        if (tss) {
            ts = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(tss, done));
            if (ts == -1 && PyErr_Occurred()) goto end;
        }
        if (record_fields(&fields[done], (int64_t)(ts - base_ts), done, keys ? PySequence_Fast_GET_ITEM(keys, done) : Py_None,
                          PySequence_Fast_GET_ITEM(values, done), hdrs ? PySequence_Fast_GET_ITEM(hdrs, done) : NULL) < 0)
            goto end;
        total += varint_size((int64_t)fields[done].body) + fields[done].body;
    }
    result = reserve ? PyByteArray_FromStringAndSize(NULL, total) : PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto end;
    char *out = reserve ? PyByteArray_AS_STRING(result) : PyBytes_AS_STRING(result);
    memset(out, 0, (size_t)reserve);
    out += reserve;
    for (Py_ssize_t i = 0; i < n; i++) out = write_record(out, &fields[i], i);
end:
    if (fields) {
        for (Py_ssize_t i = 0; i < done; i++) Py_XDECREF(fields[i].hseq);
        PyMem_Free(fields);
    }
    Py_DECREF(values);
    Py_XDECREF(keys);
    Py_XDECREF(tss);
    Py_XDECREF(hdrs);
    return result;
}

/* Zig-zag varint read; -1 when it runs past `end` or is longer than 10 bytes. */
static int read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t result = 0;
    for (int i = 0, shift = 0; i < 10; i++, shift += 7) {
        if (*pos >= end) return -1;
        unsigned char b = buf[(*pos)++];
        result |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
            return 0;
        }
    }
    return -1;
}

/* A length-prefixed bytes field (-1 = None) inside [pos, end): a new reference, or NULL. */
static PyObject *read_field(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int *bad) {
    int64_t n;
    if (read_varint(buf, pos, end, &n) < 0 || n < -1 || n > end - *pos) { *bad = 1; return NULL; }
    if (n < 0) Py_RETURN_NONE;
    PyObject *o = PyBytes_FromStringAndSize((const char *)buf + *pos, (Py_ssize_t)n);
    *pos += (Py_ssize_t)n;
    return o;
}

static PyObject *decode_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base_offset, base_ts, append_ts, min_offset;
    PyObject *topic, *partition;
    PyTypeObject *msg_type;
    if (!PyArg_ParseTuple(args, "y*LLLLOOO!", &view, &base_offset, &base_ts, &append_ts, &min_offset, &topic,
                          &partition, &PyType_Type, &msg_type))
        return NULL;
    if (!PyType_IsSubtype(msg_type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "message_type must be a tuple subclass");
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t total = view.len, pos = 0;
    Py_ssize_t index = 0;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    while (pos < total) {
        Py_ssize_t start = pos;
        int64_t len, ts_delta, off_delta, hcount;
        int bad = 0;
        PyObject *key = NULL, *value = NULL, *headers = NULL, *msg = NULL;
        if (read_varint(buf, &pos, total, &len) < 0 || len < 1 || len > total - pos) goto malformed;
        Py_ssize_t end = pos + (Py_ssize_t)len;
        pos += 1; /* attributes */
        if (read_varint(buf, &pos, end, &ts_delta) < 0 || read_varint(buf, &pos, end, &off_delta) < 0)
            goto malformed;
        long long offset = base_offset + off_delta;
        if (offset < min_offset) { pos = end; index++; continue; }
        key = read_field(buf, &pos, end, &bad);
        if (!key) goto record_fail;
        value = read_field(buf, &pos, end, &bad);
        if (!value) goto record_fail;
        if (read_varint(buf, &pos, end, &hcount) < 0 || hcount < 0 || hcount > end - pos) { bad = 1; goto record_fail; }
        headers = PyList_New((Py_ssize_t)hcount);
        if (!headers) goto record_fail;
        for (Py_ssize_t j = 0; j < (Py_ssize_t)hcount; j++) {
            int64_t nl;
            if (read_varint(buf, &pos, end, &nl) < 0 || nl < 0 || nl > end - pos) { bad = 1; goto record_fail; }
            PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + pos, (Py_ssize_t)nl, "strict");
            if (!name) { PyErr_Clear(); bad = 1; goto record_fail; }
            pos += (Py_ssize_t)nl;
            PyObject *hv = read_field(buf, &pos, end, &bad);
            if (!hv) { Py_DECREF(name); goto record_fail; }
            PyObject *pair = PyTuple_Pack(2, name, hv);
            Py_DECREF(name);
            Py_DECREF(hv);
            if (!pair) goto record_fail;
            PyList_SET_ITEM(headers, j, pair);
        }
        if (pos != end) { bad = 1; goto record_fail; }
        msg = msg_type->tp_alloc(msg_type, 7);
        if (!msg) goto record_fail;
        PyObject *off_o = PyLong_FromLongLong(offset);
        PyObject *ts_o = PyLong_FromLongLong(append_ts >= 0 ? append_ts : base_ts + ts_delta);
        if (!off_o || !ts_o) { Py_XDECREF(off_o); Py_XDECREF(ts_o); goto record_fail; }
        Py_INCREF(topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(msg, 0, topic);
        PyTuple_SET_ITEM(msg, 1, partition);
        PyTuple_SET_ITEM(msg, 2, off_o);
        PyTuple_SET_ITEM(msg, 3, key);
        PyTuple_SET_ITEM(msg, 4, value);
        PyTuple_SET_ITEM(msg, 5, headers);
        PyTuple_SET_ITEM(msg, 6, ts_o);
        key = value = headers = NULL;
        if (PyList_Append(out, msg) < 0) { Py_DECREF(msg); goto fail; }
        Py_DECREF(msg);
        index++;
        continue;
    record_fail:
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        Py_XDECREF(msg);
        if (!bad) goto fail;
    malformed:
        PyErr_Format(PyExc_ValueError, "malformed record %zd at byte %zd of the records section", index, start);
        goto fail;
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *py_varint_size(PyObject *self, PyObject *arg) {
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromSsize_t(varint_size((int64_t)v));
}

/* Kafka's murmur2 (the Java client's Utils.murmur2: seed 0x9747b28c, little-endian 4-byte words). */
static uint32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length / 4;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const unsigned char *w = data + 4 * i;
        uint32_t k = (uint32_t)w[0] | ((uint32_t)w[1] << 8) | ((uint32_t)w[2] << 16) | ((uint32_t)w[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * n4;
    switch (length & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8; /* fall through */
    case 1: h ^= (uint32_t)tail[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *py_murmur2(PyObject *self, PyObject *arg) {
    if (!PyBytes_Check(arg)) { PyErr_SetString(PyExc_TypeError, "murmur2 takes bytes"); return NULL; }
    return PyLong_FromLong((long)(int32_t)murmur2((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}

/* Kafka's default partition of a key: (murmur2(key) & 0x7fffffff) % partitions. */
static PyObject *py_partition_for_key(PyObject *self, PyObject *args) {
    PyObject *key;
    Py_ssize_t partitions;
    if (!PyArg_ParseTuple(args, "On", &key, &partitions)) return NULL;
    if (!PyBytes_Check(key)) { PyErr_SetString(PyExc_TypeError, "the key must be bytes"); return NULL; }
    if (partitions <= 0) { PyErr_SetString(PyExc_ValueError, "partitions must be > 0"); return NULL; }
    uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)) & 0x7fffffffu;
    return PyLong_FromSsize_t((Py_ssize_t)(h % (uint32_t)partitions));
}

static PyMethodDef methods[] = {
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(base_timestamp, records) -> the records section of a RecordBatch v2"},
    {"encode_columns", encode_columns, METH_VARARGS,
     "encode_columns(base_timestamp, timestamps, keys, values, headers) -> the records section of a RecordBatch v2"},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(records, base_offset, base_timestamp, log_append_time, min_offset, topic, partition, "
     "message_type) -> [message_type(topic, partition, offset, key, value, headers, timestamp)]"},
    {"murmur2", py_murmur2, METH_O, "murmur2(data: bytes) -> Kafka's murmur2 as a signed 32-bit int"},
    {"partition_for_key", py_partition_for_key, METH_VARARGS,
     "partition_for_key(key: bytes, partitions) -> (murmur2(key) & 0x7fffffff) % partitions, Kafka's default"},
    {"varint_size", py_varint_size, METH_O, "varint_size(v) -> bytes of v as a zig-zag varint"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batchbuild",
                                    "Native RecordBatch v2 record encoding (producer) and decoding (consumer).", -1, methods};

PyMODINIT_FUNC PyInit__batchbuild(void) { return PyModule_Create(&module); }
