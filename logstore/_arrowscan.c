/*
 * Native RecordBatch v2 -> Arrow column buffers (the decoder behind logstore/record_arrow.py).
 *
 * One pass over a chunk of a `.log` (whole batches back to back, as stored): framing, magic,
 * CRC-32C of bytes 21..end of every batch that is used, then every record of an uncompressed
 * batch walked with exactly the checks of logstore.record_batch._walk_records (the pure-Python
 * reference) and, for the wanted rows, its fields appended to growable column buffers:
 *
 *   offset int64 | timestamp int64 (microseconds) | timestamp_type int32 | key, value: Arrow
 *   binary (int32 offsets into one data buffer + validity bitmap) | headers: list offsets int32,
 *   header keys as Arrow utf8 (invalid UTF-8 replaced as Python's errors="replace"), header values
 *   binary | leader_epoch int32 | producer_id int64
 *
 * Only the columns named in the mask are filled: a scan that needs none of key, value and headers
 * still walks and checks every record but copies nothing of them.
 *
 * A compressed batch is handed back to Python (status INFLATE) after its CRC was checked; Python
 * inflates it with logstore.compression and calls add_inflated. `take()` hands the buffers over
 * as objects exporting the buffer protocol (no copy; pyarrow.py_buffer wraps them) and starts
 * empty ones.
 *
 * Statuses of Decoder.feed(buf, start, lo, hi, min_ts, max_ts) -> (status, position, detail):
 *   0 DONE     everything before `position` is consumed; from there on is a partial batch (or
 *              nothing)
 *   1 FULL     the rows reached max_rows or the data max_bytes: take() and feed again from
 *              `position`
 *   2 INFLATE  the batch at `position` (detail = its size) is compressed and its CRC checked
 *   3 STOP     the batch at `position` starts above `hi`: nothing after it is wanted
 *   4 CORRUPT  the batch at `position` fails framing, magic or CRC (detail = message)
 *   5 INVALID  a record of the batch at `position` is malformed (detail = message)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif

/* ------------------------------------------------------------------------------------------ */
/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)                                        */

static uint32_t crc_table[8][256];
static int crc_hw = 0;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

#ifdef HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(const uint8_t *p, size_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static uint32_t crc32c(const uint8_t *p, size_t n)
{
#ifdef HAVE_SSE42_PATH
    if (crc_hw)
        return crc_hw_run(p, n);
#endif
    return crc_sw(p, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Growable buffers and the object that hands one to Python                                   */

typedef struct {
    uint8_t *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    uint8_t *d = PyMem_RawRealloc(b->data, (size_t)cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

#define PUT(b, T, v) do { T v_ = (T)(v); if (buf_put((b), &v_, sizeof v_) < 0) return -1; } while (0)

typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t len;
} Chunk;

static void chunk_dealloc(Chunk *self)
{
    PyMem_RawFree(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int chunk_getbuffer(Chunk *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (uint8_t *)"", self->len, 1, flags);
}

static PyBufferProcs chunk_as_buffer = {(getbufferproc)chunk_getbuffer, NULL};

static Py_ssize_t chunk_length(Chunk *self) { return self->len; }

static PySequenceMethods chunk_as_sequence = {.sq_length = (lenfunc)chunk_length};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lakelog.logstore._arrowscan.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_dealloc = (destructor)chunk_dealloc,
    .tp_as_buffer = &chunk_as_buffer,
    .tp_as_sequence = &chunk_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only buffer filled by the decoder (hand it to pyarrow.py_buffer).",
};

/* Moves the bytes of `b` into a new Chunk; `b` starts empty. */
static PyObject *buf_take(Buf *b)
{
    Chunk *c = PyObject_New(Chunk, &ChunkType);
    if (!c)
        return NULL;
    c->data = b->data;
    c->len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)c;
}

/* ------------------------------------------------------------------------------------------ */
/* The decoder                                                                                 */

enum {
    COL_OFFSET = 1, COL_TIMESTAMP = 2, COL_TIMESTAMP_TYPE = 4, COL_KEY = 8, COL_VALUE = 16,
    COL_HEADERS = 32, COL_LEADER_EPOCH = 64, COL_PRODUCER_ID = 128,
};

enum { ST_DONE = 0, ST_FULL = 1, ST_INFLATE = 2, ST_STOP = 3, ST_CORRUPT = 4, ST_INVALID = 5 };

/* Binary column: int32 offsets (one per row + 1), data, validity bitmap. */
typedef struct {
    Buf offsets, data, valid;
    Py_ssize_t nulls;
} BinCol;

typedef struct {
    PyObject_HEAD
    int columns;
    Py_ssize_t max_rows, max_bytes;
    Py_ssize_t rows, nheaders;
    int64_t segment_end, prev_last;  /* batches must follow prev_last and end at or below segment_end */
    Buf offset, timestamp, timestamp_type, leader_epoch, producer_id;
    BinCol key, value;
    Buf header_list;  /* int32 list offsets into the header entries */
    BinCol header_key, header_value;
} Decoder;

static void bincol_free(BinCol *c)
{
    PyMem_RawFree(c->offsets.data);
    PyMem_RawFree(c->data.data);
    PyMem_RawFree(c->valid.data);
    memset(c, 0, sizeof *c);
}

static int bincol_start(BinCol *c)
{
    int32_t zero = 0;
    c->nulls = 0;
    return buf_put(&c->offsets, &zero, 4);
}

/* Appends item `index` (0-based) of a binary column: NULL `src` with n == -1 is a null. */
static int bincol_add(BinCol *c, Py_ssize_t index, const uint8_t *src, int64_t n)
{
    Py_ssize_t byte = index >> 3;
    if (c->valid.len <= byte) {
        if (buf_reserve(&c->valid, byte + 1 - c->valid.len) < 0)
            return -1;
        memset(c->valid.data + c->valid.len, 0, (size_t)(byte + 1 - c->valid.len));
        c->valid.len = byte + 1;
    }
    if (n < 0) {
        c->nulls++;
    } else {
        c->valid.data[byte] |= (uint8_t)(1u << (index & 7));
        if (buf_put(&c->data, src, (Py_ssize_t)n) < 0)
            return -1;
    }
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of binary data in one Arrow batch");
        return -1;
    }
    PUT(&c->offsets, int32_t, c->data.len);
    return 0;
}

static int decoder_start(Decoder *d)
{
    d->rows = d->nheaders = 0;
    if ((d->columns & COL_KEY) && bincol_start(&d->key) < 0)
        return -1;
    if ((d->columns & COL_VALUE) && bincol_start(&d->value) < 0)
        return -1;
    if (d->columns & COL_HEADERS) {
        int32_t zero = 0;
        if (buf_put(&d->header_list, &zero, 4) < 0 || bincol_start(&d->header_key) < 0 ||
            bincol_start(&d->header_value) < 0)
            return -1;
    }
    return 0;
}

static void decoder_free_buffers(Decoder *d)
{
    Buf *bufs[] = {&d->offset, &d->timestamp, &d->timestamp_type, &d->leader_epoch, &d->producer_id,
                   &d->header_list};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        PyMem_RawFree(bufs[i]->data);
        memset(bufs[i], 0, sizeof(Buf));
    }
    bincol_free(&d->key);
    bincol_free(&d->value);
    bincol_free(&d->header_key);
    bincol_free(&d->header_value);
}

static void decoder_dealloc(Decoder *d)
{
    decoder_free_buffers(d);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static int decoder_init(Decoder *d, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"columns", "max_rows", "max_bytes", "segment_base", "segment_end", NULL};
    int columns;
    Py_ssize_t max_rows, max_bytes;
    long long segment_base = INT64_MIN, segment_end = INT64_MAX;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "inn|LL", kwlist, &columns, &max_rows, &max_bytes, &segment_base,
                                     &segment_end))
        return -1;
    if (max_rows < 1 || max_bytes < 1 || max_bytes > (Py_ssize_t)1 << 30) {
        PyErr_SetString(PyExc_ValueError, "max_rows must be >= 1 and max_bytes within 1..1 GiB");
        return -1;
    }
    decoder_free_buffers(d);
    d->columns = columns;
    d->max_rows = max_rows;
    d->max_bytes = max_bytes;
    d->prev_last = segment_base == INT64_MIN ? INT64_MIN : segment_base - 1;
    d->segment_end = segment_end;
    return decoder_start(d);
}

static inline uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}
static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

typedef struct {
    int64_t base_offset;
    int32_t length, leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp, max_timestamp, producer_id;
    int32_t count;
} Header;

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12

static void parse_header(const uint8_t *p, Header *h)
{
    h->base_offset = (int64_t)be64(p);
    h->length = (int32_t)be32(p + 8);
    h->leader_epoch = (int32_t)be32(p + 12);
    h->magic = (int8_t)p[16];
    h->crc = be32(p + 17);
    h->attributes = (int16_t)be16(p + 21);
    h->last_offset_delta = (int32_t)be32(p + 23);
    h->base_timestamp = (int64_t)be64(p + 27);
    h->max_timestamp = (int64_t)be64(p + 35);
    h->producer_id = (int64_t)be64(p + 43);
    h->count = (int32_t)be32(p + 57);
}

/* A zig-zag varint of at most max_bytes (<= 5) bytes: exact in int64. */
static inline int varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int64_t *out)
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

/* A zig-zag varlong of up to 10 bytes (70 bits, as Python's unbounded reference reads it). */
static inline int varlong(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, __int128 *out)
{
    unsigned __int128 result = 0;
    int shift = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return -1;
        uint8_t b = buf[(*pos)++];
        result |= (unsigned __int128)(b & 0x7F) << shift;
        if (b < 0x80) {
            __int128 half = (__int128)(result >> 1);
            *out = (result & 1) ? -half - 1 : half;
            return 0;
        }
        shift += 7;
    }
    return -2;
}

/* Timestamps in ms whose microseconds fit int64 (what an Arrow timestamp[us] column holds). */
#define MAX_TIMESTAMP_MS ((__int128)INT64_MAX / 1000)

/* UTF-8 of a header key as Python's bytes.decode("utf-8", "replace").encode() gives it. */
static int put_header_key(Decoder *d, Py_ssize_t index, const uint8_t *p, int64_t n)
{
    int ascii = 1;
    for (int64_t i = 0; i < n; i++)
        if (p[i] & 0x80) {
            ascii = 0;
            break;
        }
    if (ascii)
        return bincol_add(&d->header_key, index, p, n);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "replace");
    if (!s)
        return -1;
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(s, &len);
    int rc = u ? bincol_add(&d->header_key, index, (const uint8_t *)u, len) : -1;
    Py_DECREF(s);
    return rc;
}

#define BAD(...) do { snprintf(msg, msglen, __VA_ARGS__); return 1; } while (0)
#define VI(dst, maxb, lim) do { if (varint(buf, &pos, (lim), (maxb), &(dst)) < 0) \
        BAD("malformed record: varint runs past its record or is too long"); } while (0)

/*
 * Walks the records of one batch (already inflated), appending the wanted rows. Returns 0, 1
 * with `msg` set (a malformed record: nothing of the batch may be used; the caller fails the
 * scan), or -1 with a Python exception set.
 */
static int decode_records(Decoder *d, const Header *h, const uint8_t *buf, Py_ssize_t end, int64_t lo, int64_t hi,
                          int64_t min_ts, int64_t max_ts, char *msg, size_t msglen)
{
    Py_ssize_t pos = 0;
    int64_t prev_delta = -1;
    int log_append = (h->attributes & 0x08) != 0;
    int cols = d->columns;
    for (int64_t i = 0; i < h->count; i++) {
        int64_t length, off_delta, klen, vlen, nheaders;
        __int128 ts_delta;
        VI(length, 5, end);
        Py_ssize_t rec_end = pos + length;
        if (length < 6 || rec_end > end)
            BAD("record %lld length %lld is impossible", (long long)i, (long long)length);
        pos += 1; /* attributes */
        if (varlong(buf, &pos, rec_end, &ts_delta) < 0)
            BAD("malformed record: varint runs past its record or is too long");
        VI(off_delta, 5, rec_end);
        if (off_delta <= prev_delta || off_delta > h->last_offset_delta)
            BAD("record %lld offset delta %lld is not increasing within 0..%d", (long long)i,
                (long long)off_delta, h->last_offset_delta);
        prev_delta = off_delta;
        VI(klen, 5, rec_end);
        if (klen < -1 || pos + (klen > 0 ? klen : 0) > rec_end)
            BAD("record %lld key length %lld is impossible", (long long)i, (long long)klen);
        const uint8_t *key = buf + pos;
        if (klen > 0)
            pos += klen;
        VI(vlen, 5, rec_end);
        if (vlen < -1 || pos + (vlen > 0 ? vlen : 0) > rec_end)
            BAD("record %lld value length %lld is impossible", (long long)i, (long long)vlen);
        const uint8_t *value = buf + pos;
        if (vlen > 0)
            pos += vlen;
        VI(nheaders, 5, rec_end);
        if (nheaders < 0 || nheaders > length)
            BAD("record %lld header count %lld is impossible", (long long)i, (long long)nheaders);
        Py_ssize_t headers_at = pos;
        for (int64_t k = 0; k < nheaders; k++) {
            int64_t hklen, hvlen;
            VI(hklen, 5, rec_end);
            if (hklen < 0 || pos + hklen > rec_end)
                BAD("record %lld header key length %lld is impossible", (long long)i, (long long)hklen);
            pos += hklen;
            VI(hvlen, 5, rec_end);
            if (hvlen < -1 || pos + (hvlen > 0 ? hvlen : 0) > rec_end)
                BAD("record %lld header value length %lld is impossible", (long long)i, (long long)hvlen);
            if (hvlen > 0)
                pos += hvlen;
        }
        if (pos != rec_end)
            BAD("record %lld length %lld does not match its fields", (long long)i, (long long)length);

        int64_t offset = h->base_offset + off_delta;
        __int128 ts = log_append ? (__int128)h->max_timestamp : (__int128)h->base_timestamp + ts_delta;
        if (ts > MAX_TIMESTAMP_MS || ts < -MAX_TIMESTAMP_MS)
            BAD("record %lld timestamp is out of range", (long long)i);
        if (offset < lo || offset > hi || ts < min_ts || ts > max_ts)
            continue;

        Py_ssize_t row = d->rows;
        if (cols & COL_OFFSET)
            PUT(&d->offset, int64_t, offset);
        if (cols & COL_TIMESTAMP)
            PUT(&d->timestamp, int64_t, (int64_t)ts * 1000);
        if (cols & COL_TIMESTAMP_TYPE)
            PUT(&d->timestamp_type, int32_t, log_append ? 1 : 0);
        if ((cols & COL_KEY) && bincol_add(&d->key, row, key, klen) < 0)
            return -1;
        if ((cols & COL_VALUE) && bincol_add(&d->value, row, value, vlen) < 0)
            return -1;
        if (cols & COL_HEADERS) {
            Py_ssize_t hp = headers_at;
            for (int64_t k = 0; k < nheaders; k++) {
                int64_t hklen = 0, hvlen = 0;
                varint(buf, &hp, rec_end, 5, &hklen);
                const uint8_t *hk = buf + hp;
                hp += hklen;
                varint(buf, &hp, rec_end, 5, &hvlen);
                if (put_header_key(d, d->nheaders, hk, hklen) < 0 ||
                    bincol_add(&d->header_value, d->nheaders, buf + hp, hvlen) < 0)
                    return -1;
                if (hvlen > 0)
                    hp += hvlen;
                d->nheaders++;
            }
            if (d->nheaders > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "too many headers in one Arrow batch");
                return -1;
            }
            PUT(&d->header_list, int32_t, d->nheaders);
        }
        if (cols & COL_LEADER_EPOCH)
            PUT(&d->leader_epoch, int32_t, h->leader_epoch);
        if (cols & COL_PRODUCER_ID)
            PUT(&d->producer_id, int64_t, h->producer_id);
        d->rows++;
    }
    if (pos != end)
        BAD("%lld bytes follow the last of %d records", (long long)(end - pos), h->count);
    return 0;
}

static Py_ssize_t decoder_bytes(Decoder *d)
{
    return d->key.data.len + d->value.data.len + d->header_key.data.len + d->header_value.data.len;
}

static PyObject *result(int status, Py_ssize_t position, PyObject *detail)
{
    if (!detail)
        return NULL;
    PyObject *r = Py_BuildValue("(inO)", status, position, detail);
    Py_DECREF(detail);
    return r;
}

static PyObject *decoder_feed(Decoder *d, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start;
    long long lo, hi, min_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*nLLLL", &view, &start, &lo, &hi, &min_ts, &max_ts))
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t end = view.len, p = start;
    char msg[240];
    PyObject *out = NULL;
    if (p < 0 || p > end) {
        PyErr_SetString(PyExc_ValueError, "start lies outside the buffer");
        goto done;
    }
    for (;;) {
        if (end - p < LOG_OVERHEAD) {
            out = result(ST_DONE, p, PyLong_FromLong(0));
            goto done;
        }
        int32_t length = (int32_t)be32(buf + p + 8);
        if (length < HEADER_SIZE - LOG_OVERHEAD) {
            snprintf(msg, sizeof msg, "batch length %d is impossible", length);
            out = result(ST_CORRUPT, p, PyUnicode_FromString(msg));
            goto done;
        }
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (p + size > end) {
            out = result(ST_DONE, p, PyLong_FromLong(0));
            goto done;
        }
        Header h;
        parse_header(buf + p, &h);
        int64_t last;  /* saturated: Python's ints do not wrap */
        if (__builtin_add_overflow(h.base_offset, (int64_t)h.last_offset_delta, &last))
            last = h.last_offset_delta > 0 ? INT64_MAX : INT64_MIN;
        if (last >= lo && (d->rows >= d->max_rows || decoder_bytes(d) >= d->max_bytes)) {
            out = result(ST_FULL, p, PyLong_FromLong(0));
            goto done;
        }
        /* The base offset lies outside the CRC: this is what catches a damaged one. */
        if (h.base_offset <= d->prev_last || last > d->segment_end || h.last_offset_delta < 0) {
            snprintf(msg, sizeof msg, "batch [%lld, %lld] does not follow offset %lld inside the segment (ends at %lld)",
                     (long long)h.base_offset, (long long)last, (long long)d->prev_last, (long long)d->segment_end);
            out = result(ST_CORRUPT, p, PyUnicode_FromString(msg));
            goto done;
        }
        d->prev_last = last;
        if (last < lo) {
            p += size;
            continue;
        }
        if (h.magic != 2) {
            snprintf(msg, sizeof msg, "batch has magic %d, expected 2", h.magic);
            out = result(ST_CORRUPT, p, PyUnicode_FromString(msg));
            goto done;
        }
        uint32_t crc = crc32c(buf + p + 21, (size_t)(size - 21));
        if (crc != h.crc) {
            snprintf(msg, sizeof msg, "batch CRC-32C is %#010x, header says %#010x", crc, h.crc);
            out = result(ST_CORRUPT, p, PyUnicode_FromString(msg));
            goto done;
        }
        if (h.base_offset > hi) {
            out = result(ST_STOP, p, PyLong_FromLong(0));
            goto done;
        }
        if ((h.attributes & 0x20) || h.max_timestamp < min_ts) {  /* control batch, or all too old */
            p += size;
            continue;
        }
        if (h.attributes & 0x07) {
            out = result(ST_INFLATE, p, PyLong_FromSsize_t(size));
            goto done;
        }
        int rc = decode_records(d, &h, buf + p + HEADER_SIZE, size - HEADER_SIZE, lo, hi, min_ts, max_ts, msg, sizeof msg);
        if (rc < 0)
            goto done;
        if (rc > 0) {
            out = result(ST_INVALID, p, PyUnicode_FromString(msg));
            goto done;
        }
        p += size;
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* add_inflated(batch, records, lo, hi, min_ts, max_ts) -> None | message. `batch` is the whole
   (CRC-checked) batch, `records` its inflated records. */
static PyObject *decoder_add_inflated(Decoder *d, PyObject *args)
{
    Py_buffer batch, records;
    long long lo, hi, min_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*y*LLLL", &batch, &records, &lo, &hi, &min_ts, &max_ts))
        return NULL;
    PyObject *out = NULL;
    char msg[240];
    if (batch.len < HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "a batch is at least 61 bytes");
        goto done;
    }
    Header h;
    parse_header(batch.buf, &h);
    int rc = decode_records(d, &h, records.buf, records.len, lo, hi, min_ts, max_ts, msg, sizeof msg);
    if (rc == 0)
        out = Py_NewRef(Py_None);
    else if (rc > 0)
        out = PyUnicode_FromString(msg);
done:
    PyBuffer_Release(&batch);
    PyBuffer_Release(&records);
    return out;
}

static PyObject *take_bincol(BinCol *c)
{
    PyObject *valid = c->nulls ? buf_take(&c->valid) : Py_NewRef(Py_None);
    if (!c->nulls) {
        c->valid.len = 0;
    }
    PyObject *r = Py_BuildValue("(NNNn)", valid, buf_take(&c->offsets), buf_take(&c->data), c->nulls);
    return r;
}

/* take() -> (rows, offset, timestamp, timestamp_type, key, value, headers, leader_epoch,
   producer_id): a column not in the mask is None; key/value are (validity or None, offsets, data,
   null count); headers is (list offsets, entries, header key column, header value column). */
static PyObject *decoder_take(Decoder *d, PyObject *unused)
{
    int c = d->columns;
#define TAKE(flag, b) ((c & (flag)) ? buf_take(b) : Py_NewRef(Py_None))
    PyObject *headers = Py_NewRef(Py_None);
    if (c & COL_HEADERS) {
        Py_DECREF(headers);
        headers = Py_BuildValue("(NnNN)", buf_take(&d->header_list), d->nheaders, take_bincol(&d->header_key),
                                take_bincol(&d->header_value));
    }
    PyObject *r = Py_BuildValue("(nNNNNNNNN)", d->rows, TAKE(COL_OFFSET, &d->offset), TAKE(COL_TIMESTAMP, &d->timestamp),
                                TAKE(COL_TIMESTAMP_TYPE, &d->timestamp_type),
                                (c & COL_KEY) ? take_bincol(&d->key) : Py_NewRef(Py_None),
                                (c & COL_VALUE) ? take_bincol(&d->value) : Py_NewRef(Py_None), headers,
                                TAKE(COL_LEADER_EPOCH, &d->leader_epoch), TAKE(COL_PRODUCER_ID, &d->producer_id));
#undef TAKE
    if (!r)
        return NULL;
    if (decoder_start(d) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *decoder_get_rows(Decoder *d, void *closure) { return PyLong_FromSsize_t(d->rows); }

static PyGetSetDef decoder_getset[] = {
    {"rows", (getter)decoder_get_rows, NULL, "rows decoded since the last take()", NULL},
    {NULL},
};

static PyMethodDef decoder_methods[] = {
    {"feed", (PyCFunction)decoder_feed, METH_VARARGS, "feed(buf, start, lo, hi, min_ts, max_ts) -> (status, position, detail)"},
    {"add_inflated", (PyCFunction)decoder_add_inflated, METH_VARARGS,
     "add_inflated(batch, records, lo, hi, min_ts, max_ts) -> None | message"},
    {"take", (PyCFunction)decoder_take, METH_NOARGS, "hand the column buffers over and start empty ones"},
    {NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lakelog.logstore._arrowscan.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(columns, max_rows, max_bytes): RecordBatch v2 bytes into Arrow column buffers.",
    .tp_methods = decoder_methods,
    .tp_getset = decoder_getset,
    .tp_init = (initproc)decoder_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    uint32_t c = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C of a buffer (the decoder's own, for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_arrowscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__arrowscan(void)
{
    crc_init();
    if (PyType_Ready(&ChunkType) < 0 || PyType_Ready(&DecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0 ||
        PyModule_AddObjectRef(m, "Chunk", (PyObject *)&ChunkType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
