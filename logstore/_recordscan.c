/*
 * Fast structural walk over the records of an (inflated) RecordBatch v2.
 *
 * The same checks as logstore.record_batch._walk_records (the pure-Python reference, which is
 * used when this extension is not built): every record's varint length fits, offset deltas are
 * consecutive (or strictly increasing within 0..lastOffsetDelta), key/value/header lengths fit
 * inside their record, each record's fields add up to its length, and the records fill the
 * buffer exactly. Nothing is decoded into Python objects, so validating a 1 MiB batch of 1 KiB
 * records costs microseconds instead of milliseconds.
 *
 * walk(buffer, count, last_offset_delta, consecutive, require_keys) -> None | (code, message)
 *   code 1: malformed / invalid record;  code 2: a record without a key where keys are required.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

static int read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return -1;
        uint8_t b = buf[(*pos)++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((result >> 1) ^ (uint64_t)(-(int64_t)(result & 1)));
            return 0;
        }
        shift += 7;
    }
    return -2;
}

#define FAIL(code, ...) do { snprintf(msg, sizeof msg, __VA_ARGS__); err = (code); goto done; } while (0)
#define VARINT(dst, maxb, lim) do { if (read_varint(buf, &pos, (lim), (maxb), &(dst)) < 0) \
        FAIL(1, "malformed record: varint runs past its record or is too long"); } while (0)

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, last_offset_delta;
    int consecutive, require_keys;
    if (!PyArg_ParseTuple(args, "y*LLpp", &view, &count, &last_offset_delta, &consecutive, &require_keys))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    int64_t prev_delta = -1;
    int err = 0;
    char msg[200];
    msg[0] = 0;

    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, nheaders;
        VARINT(length, 5, end);
        Py_ssize_t rec_end = pos + length;
        if (length < 6 || rec_end > end)
            FAIL(1, "record %lld length %lld is impossible", i, (long long)length);
        pos += 1; /* attributes */
        VARINT(ts_delta, 10, rec_end);
        VARINT(off_delta, 5, rec_end);
        if (consecutive) {
            if (off_delta != i)
                FAIL(1, "record %lld has offset delta %lld: offsets must be consecutive", i, (long long)off_delta);
        } else if (off_delta <= prev_delta || off_delta > last_offset_delta) {
            FAIL(1, "record %lld offset delta %lld is not increasing within 0..%lld", i,
                 (long long)off_delta, last_offset_delta);
        }
        prev_delta = off_delta;
        VARINT(klen, 5, rec_end);
        if (klen < -1 || pos + (klen > 0 ? klen : 0) > rec_end)
            FAIL(1, "record %lld key length %lld is impossible", i, (long long)klen);
        if (klen == -1) {
            if (require_keys)
                FAIL(2, "compacted topics require a key on every record");
        } else {
            pos += klen;
        }
        VARINT(vlen, 5, rec_end);
        if (vlen < -1 || pos + (vlen > 0 ? vlen : 0) > rec_end)
            FAIL(1, "record %lld value length %lld is impossible", i, (long long)vlen);
        if (vlen > 0)
            pos += vlen;
        VARINT(nheaders, 5, rec_end);
        if (nheaders < 0 || nheaders > length)
            FAIL(1, "record %lld header count %lld is impossible", i, (long long)nheaders);
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hklen, hvlen;
            VARINT(hklen, 5, rec_end);
            if (hklen < 0 || pos + hklen > rec_end)
                FAIL(1, "record %lld header key length %lld is impossible", i, (long long)hklen);
            pos += hklen;
            VARINT(hvlen, 5, rec_end);
            if (hvlen < -1 || pos + (hvlen > 0 ? hvlen : 0) > rec_end)
                FAIL(1, "record %lld header value length %lld is impossible", i, (long long)hvlen);
            if (hvlen > 0)
                pos += hvlen;
        }
        if (pos != rec_end)
            FAIL(1, "record %lld length %lld does not match its fields", i, (long long)length);
    }
    if (consecutive && prev_delta != last_offset_delta)
        FAIL(1, "last offset delta %lld does not match the last record", last_offset_delta);
    if (pos != end)
        FAIL(1, "%lld bytes follow the last of %lld records", (long long)(end - pos), count);
done:
    PyBuffer_Release(&view);
    if (err)
        return Py_BuildValue("(is)", err, msg);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Structural walk over a batch's records; None or (code, message)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }
