/* kop.pulsar._native: the two per-message loops of the Kafka <-> Pulsar conversion, in C.

Why our own code: no maintained library converts between Kafka record batches (zig-zag varint records) and
Pulsar batch payloads (u32 size . SingleMessageMetadata . payload); both brokers do it in their own code (KoP
in Java). The loops are small and the Python versions in kop/pulsar/convert.py stay the reference: these
functions give byte-for-byte the same output (tests/test_pulsar_native.py compares them on random and on
malformed batches) and return None for anything they do not handle exactly - malformed input (a truncated
varint, sizes that do not add up), text that is not UTF-8, values past 64 bits, base64 that is not canonical -
so that the Python path decides, converting it or raising the precise error. Every read is checked against
the end of the input (or of the record/metadata being parsed) before it happens.

records_to_batch(data, count, fixed_ts, base_ts, base_seq[, ids])
        -> (payload, first_key, same_key, version, unknown_ids) | None
    = convert._records_to_batch_py: a Kafka batch's uncompressed records -> a Pulsar batch payload; with ids (a
    dict Confluent id -> schema version) a value that starts with 0x00 + a known id loses those 5 bytes.
batch_to_records(data, count, publish_time[, prefix]) -> (body, written, base_ts, max_ts) | None
    = convert._batch_to_records_py: an uncompressed Pulsar batch payload -> Kafka records; prefix (bytes) goes
    before every non-null value.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- a growable output buffer ------------------------------------------------------------------------ */

typedef struct {
    uint8_t *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} Out;

static int out_reserve(Out *o, Py_ssize_t extra)
{
    if (extra <= o->cap - o->len)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    uint8_t *nb = PyMem_Realloc(o->buf, (size_t)cap);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = nb;
    o->cap = cap;
    return 0;
}

/* Writers: the caller has reserved the room. */
static inline void put_byte(Out *o, uint8_t b) { o->buf[o->len++] = b; }

static inline void put_bytes(Out *o, const uint8_t *p, Py_ssize_t n)
{
    if (n > 0) {
        memcpy(o->buf + o->len, p, (size_t)n);
        o->len += n;
    }
}

static inline void put_uvarint(Out *o, uint64_t v)
{
    while (v > 0x7F) {
        o->buf[o->len++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    o->buf[o->len++] = (uint8_t)v;
}

static inline uint64_t zigzag_encode(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline void put_zigzag(Out *o, int64_t v) { put_uvarint(o, zigzag_encode(v)); }

static inline int uvarint_len(uint64_t v)
{
    int n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline int zigzag_len(int64_t v) { return uvarint_len(zigzag_encode(v)); }

/* ---- readers: 0 on success, -1 when the input is not what the fast path handles ------------------------ */

/* An unsigned varint of at most 10 bytes inside [*pos, end) whose value fits 64 bits (Python's reference
   reads up to 10 bytes too; a value past 64 bits is left to it). */
static inline int get_uvarint(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, uint64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = d[p++];
        if (shift == 63 && (b & 0x7F) > 1)
            return -1;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

static inline int get_zigzag(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t raw;
    if (get_uvarint(d, end, pos, &raw) < 0)
        return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* Whether Python's strict UTF-8 decoder accepts the bytes: ASCII here, anything else asked of Python. */
static int is_utf8(const uint8_t *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (s == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(s);
            return 1;
        }
    }
    return 1;
}

/* ---- Kafka records -> Pulsar batch payload ----------------------------------------------------------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static inline Py_ssize_t b64_len(Py_ssize_t n) { return (n + 2) / 3 * 4; }

static void put_b64(Out *o, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        put_byte(o, (uint8_t)B64[v >> 18]);
        put_byte(o, (uint8_t)B64[(v >> 12) & 63]);
        put_byte(o, (uint8_t)B64[(v >> 6) & 63]);
        put_byte(o, (uint8_t)B64[v & 63]);
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        put_byte(o, (uint8_t)B64[v >> 18]);
        put_byte(o, (uint8_t)B64[(v >> 12) & 63]);
        put_byte(o, '=');
        put_byte(o, '=');
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        put_byte(o, (uint8_t)B64[v >> 18]);
        put_byte(o, (uint8_t)B64[(v >> 12) & 63]);
        put_byte(o, (uint8_t)B64[(v >> 6) & 63]);
        put_byte(o, '=');
    }
}

#define FALLBACK goto fallback
#define MAX_UNKNOWN_IDS 16  /* = convert.MAX_UNKNOWN_IDS */
/* = convert.ORDERING_KEY_HEADER: the record header holding a Pulsar ordering key that is not the record's key */
static const char ORDERING_KEY_HEADER[] = "pulsar.ordering_key";
#define ORDERING_KEY_HEADER_LEN ((int64_t)(sizeof(ORDERING_KEY_HEADER) - 1))

static inline int is_ordering_header(const uint8_t *k, int64_t n)
{
    return n == ORDERING_KEY_HEADER_LEN && memcmp(k, ORDERING_KEY_HEADER, (size_t)n) == 0;
}

/* long: one flat loop over the records, each field read and checked in order (see convert._records_to_batch_py,
   which it mirrors step for step), then the message's SingleMessageMetadata written field by field. */
static PyObject *records_to_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    PyObject *fixed_obj, *ids = Py_None;
    long long base_ts, base_seq;
    if (!PyArg_ParseTuple(args, "y*nOLL|O", &view, &count, &fixed_obj, &base_ts, &base_seq, &ids))
        return NULL;
    if (ids == Py_None) {
        ids = NULL;
    } else if (!PyDict_Check(ids)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "ids must be a dict (Confluent id -> schema version) or None");
        return NULL;
    }
    /* Confluent prefixes: the version of the first record stripped, the ids the dict lacks, the last id read */
    long long version = -1;
    uint32_t unknown[MAX_UNKNOWN_IDS];
    int n_unknown = 0;
    uint32_t last_sid = 0;
    long long last_known = -1;
    int have_last = 0;
    int has_fixed = fixed_obj != Py_None;
    long long fixed_ts = 0;
    if (has_fixed) {
        fixed_ts = PyLong_AsLongLong(fixed_obj);
        if (fixed_ts == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    const uint8_t *d = view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = 0;
    Out o = {NULL, 0, 0};
    const uint8_t *first_key = NULL;
    int64_t first_klen = -1;
    int same_key = 1;
    if (count <= 0 || count > end)  /* every record takes bytes: a count past the size is the Python path's to refuse */
        FALLBACK;
    if (out_reserve(&o, end + end / 2 + count * 24) < 0)
        goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, tsd, delta, klen, vlen, hcount;
        if (get_zigzag(d, end, &pos, &length) < 0 || length < 0 || length > end - pos)
            FALLBACK;
        const Py_ssize_t stop = pos + (Py_ssize_t)length;
        if (pos >= stop)  /* the attributes byte */
            FALLBACK;
        pos++;
        if (get_zigzag(d, stop, &pos, &tsd) < 0 || get_zigzag(d, stop, &pos, &delta) < 0)
            FALLBACK;
        if (get_zigzag(d, stop, &pos, &klen) < 0)
            FALLBACK;
        const uint8_t *key = NULL;
        if (klen < 0) {
            klen = -1;  /* any negative length is a null key */
        } else {
            if (klen > stop - pos)
                FALLBACK;
            key = d + pos;
            pos += (Py_ssize_t)klen;
        }
        if (get_zigzag(d, stop, &pos, &vlen) < 0)
            FALLBACK;
        const uint8_t *value = d + pos;
        if (vlen >= 0) {
            if (vlen > stop - pos)
                FALLBACK;
            pos += (Py_ssize_t)vlen;
        }
        if (get_zigzag(d, stop, &pos, &hcount) < 0)
            FALLBACK;
        if (hcount < 0 || hcount > stop - pos)
            FALLBACK;
        /* First pass over the headers: check them (a null key or text that is not UTF-8 is the Python
           path's to refuse or to replace) and find where they end. */
        const Py_ssize_t headers_at = pos;
        int has_ordering = 0;  /* an ORDERING_KEY_HEADER: the ordering key is its value (NULL: none), not the key */
        const uint8_t *okey = NULL;
        int64_t oklen = -1;
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hk, hv;
            if (get_zigzag(d, stop, &pos, &hk) < 0 || hk < 0 || hk > stop - pos || !is_utf8(d + pos, (Py_ssize_t)hk))
                FALLBACK;
            int ordering = is_ordering_header(d + pos, hk);
            if (ordering && has_ordering)  /* twice: the Python path takes the last */
                FALLBACK;
            pos += (Py_ssize_t)hk;
            if (get_zigzag(d, stop, &pos, &hv) < 0)
                FALLBACK;
            if (ordering) {
                has_ordering = 1;
                oklen = hv < 0 ? -1 : hv;
                okey = hv < 0 ? NULL : d + pos;
            }
            if (hv >= 0) {
                if (hv > stop - pos || (!ordering && !is_utf8(d + pos, (Py_ssize_t)hv)))
                    FALLBACK;
                pos += (Py_ssize_t)hv;
            }
        }
        if (pos != stop)
            FALLBACK;
        const uint8_t *ord = has_ordering ? okey : key;  /* the record's ordering key: what Key_Shared hashes */
        int64_t ordlen = has_ordering ? oklen : klen;
        if (i == 0) {
            first_key = ord;
            first_klen = ordlen;
        } else if (same_key) {
            if (ordlen != first_klen || (ordlen > 0 && memcmp(ord, first_key, (size_t)ordlen) != 0))
                same_key = 0;
        }
        if (ids != NULL && vlen >= 5 && value[0] == 0) {  /* Confluent's prefix: magic 0, id (big-endian) */
            uint32_t sid = ((uint32_t)value[1] << 24) | ((uint32_t)value[2] << 16) | ((uint32_t)value[3] << 8) | value[4];
            if (!have_last || sid != last_sid) {  /* a batch's records mostly name one id: one lookup */
                PyObject *k = PyLong_FromUnsignedLong(sid);
                if (k == NULL)
                    goto error;
                PyObject *v = PyDict_GetItemWithError(ids, k);  /* borrowed */
                Py_DECREF(k);
                if (v == NULL) {
                    if (PyErr_Occurred())
                        goto error;
                    last_known = -1;
                    if (sid > 0 && sid < 0x80000000u && n_unknown < MAX_UNKNOWN_IDS) {
                        int seen = 0;
                        for (int u = 0; u < n_unknown; u++)
                            seen |= unknown[u] == sid;
                        if (!seen)
                            unknown[n_unknown++] = sid;
                    }
                } else {
                    last_known = PyLong_AsLongLong(v);
                    if (last_known < 0) {  /* not a version: the Python path decides what it means */
                        PyErr_Clear();
                        FALLBACK;
                    }
                }
                last_sid = sid;
                have_last = 1;
            }
            if (last_known >= 0) {
                value += 5;
                vlen -= 5;
                if (version < 0)
                    version = last_known;
            }
        }
        int64_t ts = fixed_ts, seq = -1;
        if (!has_fixed && __builtin_add_overflow((int64_t)base_ts, tsd, &ts))
            FALLBACK;
        if (base_seq >= 0 && __builtin_add_overflow((int64_t)base_seq, delta, &seq))
            FALLBACK;
        int key_utf8 = key != NULL && is_utf8(key, (Py_ssize_t)klen);
        /* Room: the framing, the fixed fields, the key twice (base64 or not), the headers with their tags. */
        Py_ssize_t room = 4 + 48 + (vlen > 0 ? (Py_ssize_t)vlen : 0) + (stop - headers_at) + (Py_ssize_t)hcount * 34;
        if (key != NULL)
            room += 2 * (b64_len((Py_ssize_t)klen) + 10);
        if (okey != NULL)
            room += (Py_ssize_t)oklen + 10;
        if (out_reserve(&o, room) < 0)
            goto error;
        const Py_ssize_t mark = o.len;
        o.len += 4;
        Py_ssize_t hp = headers_at;  /* properties (field 1): KeyValue(key 1, value 2) per header */
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hk = 0, hv = 0;  /* checked by the first pass: these reads succeed */
            get_zigzag(d, stop, &hp, &hk);
            const uint8_t *hkp = d + hp;
            hp += (Py_ssize_t)hk;
            get_zigzag(d, stop, &hp, &hv);
            const uint8_t *hvp = d + hp;
            if (hv < 0)
                hv = 0;
            hp += (Py_ssize_t)hv;
            if (has_ordering && is_ordering_header(hkp, hk))  /* the ordering key, not a property */
                continue;
            uint64_t kv = 1 + uvarint_len((uint64_t)hk) + (uint64_t)hk + 1 + uvarint_len((uint64_t)hv) + (uint64_t)hv;
            put_byte(&o, 0x0A);
            put_uvarint(&o, kv);
            put_byte(&o, 0x0A);
            put_uvarint(&o, (uint64_t)hk);
            put_bytes(&o, hkp, (Py_ssize_t)hk);
            put_byte(&o, 0x12);
            put_uvarint(&o, (uint64_t)hv);
            put_bytes(&o, hvp, (Py_ssize_t)hv);
        }
        if (key != NULL) {  /* partition_key (2): the key as text, or base64 of it */
            put_byte(&o, 0x12);
            if (key_utf8) {
                put_uvarint(&o, (uint64_t)klen);
                put_bytes(&o, key, (Py_ssize_t)klen);
            } else {
                put_uvarint(&o, (uint64_t)b64_len((Py_ssize_t)klen));
                put_b64(&o, key, (Py_ssize_t)klen);
            }
        }
        put_byte(&o, 0x18);  /* payload_size (3) */
        put_uvarint(&o, vlen > 0 ? (uint64_t)vlen : 0);
        if (ts > 0) {  /* event_time (5) */
            put_byte(&o, 0x28);
            put_uvarint(&o, (uint64_t)ts);
        }
        if (key != NULL && !key_utf8) {  /* partition_key_b64_encoded (6) */
            put_byte(&o, 0x30);
            put_byte(&o, 0x01);
        }
        if (ord != NULL) {  /* ordering_key (7): the key, or the header's value */
            put_byte(&o, 0x3A);
            put_uvarint(&o, (uint64_t)ordlen);
            put_bytes(&o, ord, (Py_ssize_t)ordlen);
        }
        if (seq >= 0) {  /* sequence_id (8) */
            put_byte(&o, 0x40);
            put_uvarint(&o, (uint64_t)seq);
        }
        if (vlen < 0) {  /* null_value (9) */
            put_byte(&o, 0x48);
            put_byte(&o, 0x01);
        }
        Py_ssize_t smm = o.len - mark - 4;
        if ((uint64_t)smm > 0xFFFFFFFFu)
            FALLBACK;
        o.buf[mark] = (uint8_t)(smm >> 24);
        o.buf[mark + 1] = (uint8_t)(smm >> 16);
        o.buf[mark + 2] = (uint8_t)(smm >> 8);
        o.buf[mark + 3] = (uint8_t)smm;
        if (vlen > 0)
            put_bytes(&o, value, (Py_ssize_t)vlen);
    }
    if (pos != end)
        FALLBACK;
    PyObject *payload = PyBytes_FromStringAndSize((const char *)o.buf, o.len);
    PyObject *fk = first_key == NULL ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)first_key, first_klen);
    PyObject *unk = PyTuple_New(n_unknown);
    for (int u = 0; unk != NULL && u < n_unknown; u++) {
        PyObject *id = PyLong_FromUnsignedLong(unknown[u]);
        if (id == NULL)
            Py_CLEAR(unk);
        else
            PyTuple_SET_ITEM(unk, u, id);
    }
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    if (payload == NULL || fk == NULL || unk == NULL) {
        Py_XDECREF(payload);
        Py_XDECREF(fk);
        Py_XDECREF(unk);
        return NULL;
    }
    return Py_BuildValue("(NNOLN)", payload, fk, same_key ? Py_True : Py_False, version, unk);
fallback:
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyMem_Free(o.buf);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---- Pulsar batch payload -> Kafka records ----------------------------------------------------------- */

typedef struct {
    const uint8_t *k, *v;
    Py_ssize_t kn, vn;
} Prop;

/* A KeyValue message at [p, e): key (1) and value (2), both UTF-8, nothing else. */
static int get_key_value(const uint8_t *d, Py_ssize_t p, Py_ssize_t e, Prop *out)
{
    out->k = out->v = d + p;
    out->kn = out->vn = 0;
    while (p < e) {
        uint8_t tag = d[p++];
        uint64_t n;
        if ((tag != 0x0A && tag != 0x12) || get_uvarint(d, e, &p, &n) < 0 || n > (uint64_t)(e - p))
            return -1;
        if (!is_utf8(d + p, (Py_ssize_t)n))
            return -1;
        if (tag == 0x0A) {
            out->k = d + p;
            out->kn = (Py_ssize_t)n;
        } else {
            out->v = d + p;
            out->vn = (Py_ssize_t)n;
        }
        p += (Py_ssize_t)n;
    }
    return 0;
}

static int b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* The decoded length of canonical base64 text (a multiple of 4, the alphabet, at most two '=' at the end),
   -1 for anything else (the Python path decides what that text means). */
static Py_ssize_t b64_decoded_len(const uint8_t *p, Py_ssize_t n)
{
    if (n % 4)
        return -1;
    Py_ssize_t pad = 0;
    if (n && p[n - 1] == '=') {
        pad = 1;
        if (p[n - 2] == '=')
            pad = 2;
    }
    for (Py_ssize_t i = 0; i < n - pad; i++)
        if (b64_value(p[i]) < 0)
            return -1;
    return n / 4 * 3 - pad;
}

static void put_b64_decoded(Out *o, const uint8_t *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int got = 0;
        for (int j = 0; j < 4; j++) {
            int x = p[i + j] == '=' ? -1 : b64_value(p[i + j]);
            if (x < 0)
                break;
            v |= (uint32_t)x << (18 - 6 * j);
            got++;
        }
        put_byte(o, (uint8_t)(v >> 16));
        if (got >= 3)
            put_byte(o, (uint8_t)(v >> 8));
        if (got == 4)
            put_byte(o, (uint8_t)v);
    }
}

/* long: the per-message loop of a Pulsar SEND, mirroring convert._batch_to_records_py: one branch per
   SingleMessageMetadata field, then the Kafka record (its length first, so computed before it is written). */
static PyObject *batch_to_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    PyObject *publish_obj, *prefix_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*nO|O", &view, &count, &publish_obj, &prefix_obj))
        return NULL;
    const uint8_t *pre = NULL;  /* Confluent's prefix, before every non-null value */
    Py_ssize_t plen = 0;
    if (prefix_obj != Py_None) {
        if (!PyBytes_Check(prefix_obj)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "prefix must be bytes or None");
            return NULL;
        }
        pre = (const uint8_t *)PyBytes_AS_STRING(prefix_obj);
        plen = PyBytes_GET_SIZE(prefix_obj);
    }
    const uint8_t *d = view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = 0;
    Out o = {NULL, 0, 0};
    Prop *props = NULL;
    Py_ssize_t props_cap = 0;
    int have_base = 0;
    int64_t base_ts = 0, max_ts = -1;
    Py_ssize_t written = 0;
    int overflow = 0;
    long long publish_time = PyLong_AsLongLongAndOverflow(publish_obj, &overflow);
    if (publish_time == -1 && PyErr_Occurred())
        goto error;
    if (overflow || publish_time < 0 || count <= 0 || count > end / 4)  /* each message has a 4-byte size */
        FALLBACK;
    if (out_reserve(&o, end + count * 16) < 0)
        goto error;
    for (Py_ssize_t delta = 0; delta < count; delta++) {
        if (end - pos < 4)
            FALLBACK;
        uint32_t size = ((uint32_t)d[pos] << 24) | ((uint32_t)d[pos + 1] << 16) | ((uint32_t)d[pos + 2] << 8) | d[pos + 3];
        pos += 4;
        if ((uint64_t)size > (uint64_t)(end - pos))
            FALLBACK;
        const Py_ssize_t md_end = pos + (Py_ssize_t)size;
        uint64_t payload_size = 0, event_time = 0;
        const uint8_t *ok = NULL, *pk = NULL;
        Py_ssize_t okn = 0, pkn = 0, nprops = 0;
        int b64 = 0, compacted = 0, null = 0;
        while (pos < md_end) {
            uint8_t tag = d[pos++];
            uint64_t v;
            if (get_uvarint(d, md_end, &pos, &v) < 0)
                FALLBACK;
            if (tag == 0x0A || tag == 0x12 || tag == 0x3A) {
                if (v > (uint64_t)(md_end - pos))
                    FALLBACK;
                const uint8_t *raw = d + pos;
                Py_ssize_t n = (Py_ssize_t)v;
                pos += n;
                if (tag == 0x3A) {
                    ok = raw;
                    okn = n;
                } else if (tag == 0x12) {
                    if (!is_utf8(raw, n))
                        FALLBACK;
                    pk = raw;
                    pkn = n;
                } else {
                    if (nprops == props_cap) {
                        Py_ssize_t cap = props_cap ? props_cap * 2 : 8;
                        Prop *np = PyMem_Realloc(props, (size_t)cap * sizeof(Prop));
                        if (np == NULL) {
                            PyErr_NoMemory();
                            goto error;
                        }
                        props = np;
                        props_cap = cap;
                    }
                    if (get_key_value(d, pos - n, pos, &props[nprops]) < 0)
                        FALLBACK;
                    nprops++;
                }
                continue;
            }
            switch (tag) {
            case 0x18: payload_size = v; break;
            case 0x28: event_time = v; break;
            case 0x20: compacted = v != 0; break;
            case 0x30: b64 = v != 0; break;
            case 0x48: null = v != 0; break;
            case 0x40: /* sequence_id: not part of a Kafka record */
            case 0x50: /* null_partition_key: no key either way */
                break;
            default:
                FALLBACK;
            }
        }
        if (payload_size >= ((uint64_t)1 << 31) || payload_size > (uint64_t)(end - pos))
            FALLBACK;
        const Py_ssize_t stop = pos + (Py_ssize_t)payload_size;
        if (compacted) {
            pos = stop;
            continue;
        }
        /* The key: the partition key (base64-decoded when flagged), else the ordering key; an ordering key that
           is not the key goes in ORDERING_KEY_HEADER. */
        const uint8_t *key = NULL;
        Py_ssize_t kn = 0;
        int key_b64 = 0, ordering = 0;
        if (pk != NULL) {
            key = pk;
            kn = pkn;
            if (b64) {
                kn = b64_decoded_len(pk, pkn);
                if (kn < 0)
                    FALLBACK;
                key_b64 = 1;
            }
            if (ok != NULL && okn == kn) {  /* the same key? (decoded into a scratch buffer when base64) */
                if (key_b64) {
                    Out scratch = {NULL, 0, 0};
                    if (out_reserve(&scratch, kn + 1) < 0)
                        goto error;
                    put_b64_decoded(&scratch, pk, pkn);
                    ordering = memcmp(ok, scratch.buf, (size_t)kn) != 0;
                    PyMem_Free(scratch.buf);
                } else {
                    ordering = memcmp(ok, pk, (size_t)okn) != 0;
                }
            } else {
                ordering = ok != NULL;
            }
        } else if (ok != NULL) {
            key = ok;
            kn = okn;
        }
        if (event_time > (uint64_t)INT64_MAX)
            FALLBACK;
        int64_t ts = event_time ? (int64_t)event_time : publish_time;
        if (!have_base) {
            base_ts = ts;
            have_base = 1;
        }
        if (ts > max_ts)
            max_ts = ts;
        int64_t dts = ts - base_ts;  /* both in [0, 2^63): no overflow */
        uint64_t rec = 1 + zigzag_len(dts) + zigzag_len(delta);
        rec += key == NULL ? 1 : zigzag_len(kn) + (uint64_t)kn;
        rec += null ? 1 : zigzag_len((int64_t)(payload_size + (uint64_t)plen)) + payload_size + (uint64_t)plen;
        if (nprops || ordering) {
            rec += zigzag_len(nprops + ordering);
            for (Py_ssize_t h = 0; h < nprops; h++)
                rec += zigzag_len(props[h].kn) + (uint64_t)props[h].kn + zigzag_len(props[h].vn) + (uint64_t)props[h].vn;
            if (ordering)
                rec += zigzag_len(ORDERING_KEY_HEADER_LEN) + (uint64_t)ORDERING_KEY_HEADER_LEN + zigzag_len(okn) + (uint64_t)okn;
        } else {
            rec += 1;
        }
        if (rec > (uint64_t)(PY_SSIZE_T_MAX / 2) || out_reserve(&o, (Py_ssize_t)rec + 10) < 0) {
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            goto error;
        }
        put_zigzag(&o, (int64_t)rec);
        put_byte(&o, 0x00);  /* attributes */
        put_zigzag(&o, dts);
        put_zigzag(&o, delta);
        if (key == NULL) {
            put_byte(&o, 0x01);  /* varint(-1): null */
        } else {
            put_zigzag(&o, kn);
            if (key_b64)
                put_b64_decoded(&o, pk, pkn);
            else
                put_bytes(&o, key, kn);
        }
        if (null) {
            put_byte(&o, 0x01);
        } else {
            put_zigzag(&o, (int64_t)(payload_size + (uint64_t)plen));
            put_bytes(&o, pre, plen);
            put_bytes(&o, d + pos, (Py_ssize_t)payload_size);
        }
        if (nprops || ordering) {
            put_zigzag(&o, nprops + ordering);
            for (Py_ssize_t h = 0; h < nprops; h++) {
                put_zigzag(&o, props[h].kn);
                put_bytes(&o, props[h].k, props[h].kn);
                put_zigzag(&o, props[h].vn);
                put_bytes(&o, props[h].v, props[h].vn);
            }
            if (ordering) {
                put_zigzag(&o, ORDERING_KEY_HEADER_LEN);
                put_bytes(&o, (const uint8_t *)ORDERING_KEY_HEADER, ORDERING_KEY_HEADER_LEN);
                put_zigzag(&o, okn);
                put_bytes(&o, ok, okn);
            }
        } else {
            put_byte(&o, 0x00);
        }
        written++;
        pos = stop;
    }
    if (pos != end)
        FALLBACK;
    PyObject *body = PyBytes_FromStringAndSize((const char *)o.buf, o.len);
    PyMem_Free(o.buf);
    PyMem_Free(props);
    PyBuffer_Release(&view);
    if (body == NULL)
        return NULL;
    return Py_BuildValue("(NnLL)", body, written, (long long)(have_base ? base_ts : 0), (long long)max_ts);
fallback:
    PyMem_Free(o.buf);
    PyMem_Free(props);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyMem_Free(o.buf);
    PyMem_Free(props);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"records_to_batch", records_to_batch, METH_VARARGS,
     "records_to_batch(data, count, fixed_ts, base_ts, base_seq[, ids]) -> "
     "(payload, first_key, same_key, version, unknown_ids) or None"},
    {"batch_to_records", batch_to_records, METH_VARARGS,
     "batch_to_records(data, count, publish_time[, prefix]) -> (body, written, base_ts, max_ts) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kop.pulsar._native",
    "The Kafka <-> Pulsar conversion loops of kop/pulsar/convert.py in C (see the comment atop _native.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
