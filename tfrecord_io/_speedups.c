/* Optional compiled core of tfrecord_io: the hot loops of framing and the Example codec.
 *
 * Every function here has a pure-Python twin that gives the same results; the Python
 * modules use these only when the extension is built (see framing.py, codec.py,
 * writer.py). Where this code meets anything it does not handle exactly as the
 * reference (upb) does, it returns None and the caller takes the Python path, so
 * errors keep the wording and the behaviour of the reference path.
 *
 *   crc32c(buf) / masked_crc32c(buf)   CRC32C: AVX-512 VPCLMULQDQ folding (>= 1 KiB) or
 *                                      SSE4.2 (3 interleaved streams) when the CPU has
 *                                      them, else a slicing-by-8 table
 *   scan_frames(buf, pos, stop, check_crc, out) -> (pos, status)
 *                                      exactly framing._scan_frames_py
 *   RecordScanner(buf, view, base, pos, stop, check_crc)
 *                                      the same scan as an iterator of (offset, view)
 *   encode_frames(payloads) -> bytes   frames of many payloads in one buffer
 *   encode_example(datum, type_map) -> bytes | None
 *                                      deterministic Example bytes from a dict
 *   parse_examples(records, keys, kinds[, mode]) -> list | None
 *                                      wire-format Example parser into columns
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define TFRIO_BIG_ENDIAN 1
#endif

/* ------------------------------------------------------------------------- CRC32C */

#define CRC_POLY 0x82F63B78u /* CRC32C (Castagnoli), reflected */
#define MASK_DELTA 0xA282EAD8u

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static inline uint64_t load64le(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#ifdef TFRIO_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t load32le(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#ifdef TFRIO_BIG_ENDIAN
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline void store32le(uint8_t *p, uint32_t v) {
#ifdef TFRIO_BIG_ENDIAN
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

static inline void store64le(uint8_t *p, uint64_t v) {
#ifdef TFRIO_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* Portable slicing-by-8 on the raw register (no pre/post inversion). */
static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint64_t v = load64le(p) ^ crc;
        crc = crc_table[7][v & 0xFF] ^ crc_table[6][(v >> 8) & 0xFF] ^ crc_table[5][(v >> 16) & 0xFF] ^
              crc_table[4][(v >> 24) & 0xFF] ^ crc_table[3][(v >> 32) & 0xFF] ^ crc_table[2][(v >> 40) & 0xFF] ^
              crc_table[1][(v >> 48) & 0xFF] ^ crc_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

/* a * b modulo the CRC polynomial, in the reflected representation (x^0 = 1 << 31). */
static uint32_t gf2_multmod(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

/* x^(8 * nbytes) modulo the polynomial: multiplying a register by it appends nbytes zeros. */
static uint32_t gf2_xpow8n(size_t nbytes) {
    uint32_t result = 1u << 31, base = 1u << 23; /* x^0, x^8 */
    while (nbytes) {
        if (nbytes & 1) result = gf2_multmod(base, result);
        base = gf2_multmod(base, base);
        nbytes >>= 1;
    }
    return result;
}

#define CRC_LONG 8192
#define CRC_SHORT 256
/* Appending n zero bytes to a register is linear in it: per block size, 4 tables of
 * 256 entries turn the GF(2) multiplication by x^(8n) into 4 lookups. */
static uint32_t crc_shift_long[4][256], crc_shift_short[4][256];
static int crc_have_hw = 0;

static void crc_init_shift(uint32_t table[4][256], size_t nbytes) {
    uint32_t k = gf2_xpow8n(nbytes);
    for (int t = 0; t < 4; t++)
        for (uint32_t b = 0; b < 256; b++) table[t][b] = gf2_multmod(k, b << (8 * t));
}

static inline uint32_t crc_shift(uint32_t table[4][256], uint32_t c) {
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^ table[3][c >> 24];
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TFRIO_X86_CRC 1
#include <nmmintrin.h>

/* Three independent streams hide the 3-cycle latency of the crc32 instruction; their
 * registers are joined with a GF(2) multiplication by x^(8*block). */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_LONG;
        do {
            c0 = _mm_crc32_u64(c0, load64le(p));
            c1 = _mm_crc32_u64(c1, load64le(p + CRC_LONG));
            c2 = _mm_crc32_u64(c2, load64le(p + 2 * CRC_LONG));
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_shift_long, crc_shift(crc_shift_long, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_SHORT;
        do {
            c0 = _mm_crc32_u64(c0, load64le(p));
            c1 = _mm_crc32_u64(c1, load64le(p + CRC_SHORT));
            c2 = _mm_crc32_u64(c2, load64le(p + 2 * CRC_SHORT));
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_shift_short, crc_shift(crc_shift_short, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, load64le(p));
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* Folding with carry-less multiplication (AVX-512 VPCLMULQDQ), for large buffers:
 * 256 bytes per step in four 512-bit registers. Folding a 128-bit block forward by D
 * bits multiplies its two halves by x^(D+32) and x^(D-32) mod P (bit-reflected,
 * shifted left by one, as in Intel's "Fast CRC Computation Using PCLMULQDQ"). The
 * register to carry in is XORed into the first 4 bytes; the 16 bytes left after the
 * folds are congruent to the data, so the crc32 instruction finishes from register 0. */
#define CRC_POLY_NORMAL 0x11EDC6F41ull
static int crc_have_vpclmul = 0;
static uint64_t fold_k[5][2]; /* D = 2048, 512, 384, 256, 128: {x^(D+32), x^(D-32)} */

static uint64_t fold_constant(unsigned e) {
    uint64_t r = 1; /* x^e mod P, normal representation */
    for (unsigned i = 0; i < e; i++) {
        r <<= 1;
        if (r & (1ull << 32)) r ^= CRC_POLY_NORMAL;
    }
    uint32_t rev = 0;
    for (int b = 0; b < 32; b++)
        if (r & (1ull << b)) rev |= 1u << (31 - b);
    return (uint64_t)rev << 1;
}

static void crc_init_fold(void) {
    static const unsigned dist[5] = {2048, 512, 384, 256, 128};
    for (int i = 0; i < 5; i++) {
        fold_k[i][0] = fold_constant(dist[i] + 32);
        fold_k[i][1] = fold_constant(dist[i] - 32);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) && __GNUC__ >= 10 || defined(__clang__))
#define TFRIO_VPCLMUL 1
#include <immintrin.h>

#define VP_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

VP_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i y) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), y, 0x96);
}

VP_TARGET static inline __m128i fold128(__m128i x, const uint64_t k[2]) {
    __m128i kk = _mm_set_epi64x((long long)k[1], (long long)k[0]);
    return _mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00), _mm_clmulepi64_si128(x, kk, 0x11));
}

/* n >= 256 */
VP_TARGET static uint32_t crc_vpclmul(uint32_t crc, const uint8_t *p, size_t n) {
    __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[0][1], (long long)fold_k[0][0]));
    __m512i x0 = _mm512_loadu_si512((const void *)p), x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128)), x3 = _mm512_loadu_si512((const void *)(p + 192));
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        x0 = fold512(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = fold512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = fold512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = fold512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[1][1], (long long)fold_k[1][0]));
    x0 = fold512(x0, k512, x1);
    x0 = fold512(x0, k512, x2);
    x0 = fold512(x0, k512, x3);
    __m128i r = _mm_xor_si128(fold128(_mm512_extracti32x4_epi32(x0, 0), fold_k[2]),
                              fold128(_mm512_extracti32x4_epi32(x0, 1), fold_k[3]));
    r = _mm_xor_si128(r, fold128(_mm512_extracti32x4_epi32(x0, 2), fold_k[4]));
    r = _mm_xor_si128(r, _mm512_extracti32x4_epi32(x0, 3));
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(r, 1));
    return crc_hw((uint32_t)c, p, n);
}
#endif

static inline uint32_t crc32c_buf(const uint8_t *p, size_t n) {
#ifdef TFRIO_VPCLMUL
    if (crc_have_vpclmul && n >= 1024) return ~crc_vpclmul(0xFFFFFFFFu, p, n);
#endif
#ifdef TFRIO_X86_CRC
    if (crc_have_hw) return ~crc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc_sw(0xFFFFFFFFu, p, n);
}

static inline uint32_t mask_crc(uint32_t c) { return ((c >> 15) | (c << 17)) + MASK_DELTA; }

/* CRC of a large buffer without holding the GIL (the buffer is pinned by a Py_buffer). */
static uint32_t crc32c_nogil(const uint8_t *p, size_t n) {
    uint32_t c;
    if (n < (1u << 16)) return crc32c_buf(p, n);
    Py_BEGIN_ALLOW_THREADS c = crc32c_buf(p, n);
    Py_END_ALLOW_THREADS return c;
}

static PyObject *py_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c_nogil((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_masked_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c_nogil((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(mask_crc(c));
}

static int cpu_has_sse42(void) {
#ifdef TFRIO_X86_CRC
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    return 0;
#endif
}

static int cpu_has_vpclmul(void) {
#ifdef TFRIO_VPCLMUL
    return cpu_has_sse42() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
#else
    return 0;
#endif
}

static const char *crc_impl_name(void) {
    return crc_have_vpclmul ? "vpclmulqdq" : crc_have_hw ? "sse4.2" : "table";
}

/* For tests and benchmarks: choose the CRC32C code ("table", "sse4.2" or
 * "vpclmulqdq", each only if the CPU has it); returns the previous choice. */
static PyObject *py_crc_impl(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    PyObject *previous = PyUnicode_FromString(crc_impl_name());
    if (!previous) return NULL;
    if (strcmp(name, "table") == 0) {
        crc_have_hw = crc_have_vpclmul = 0;
    } else if (strcmp(name, "sse4.2") == 0 && cpu_has_sse42()) {
        crc_have_hw = 1;
        crc_have_vpclmul = 0;
    } else if (strcmp(name, "vpclmulqdq") == 0 && cpu_has_vpclmul()) {
        crc_have_hw = crc_have_vpclmul = 1;
    } else {
        Py_DECREF(previous);
        PyErr_Format(PyExc_ValueError, "CRC32C implementation %R is unknown or not supported by this CPU/build", arg);
        return NULL;
    }
    return previous;
}

/* --------------------------------------------------------------------- framing */

enum { NEED_MORE = 0, STOPPED = 1, BAD_LENGTH_CRC = 2, BAD_DATA_CRC = 3, TOO_LARGE = 4 };

static int as_offset(PyObject *obj, long long *out, const char *what) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow > 0) v = LLONG_MAX;
    if (overflow < 0) v = LLONG_MIN;
    *out = v;
    (void)what;
    return 0;
}

static int append_int(PyObject *list, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (!o) return -1;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r;
}

/* scan_frames(buf, pos, stop, check_crc, out[, max_len]) -> (pos, status): see _scan_frames_py. */
static PyObject *py_scan_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan_frames(buf, pos, stop, check_crc, out[, max_len]) takes 5 or 6 arguments");
        return NULL;
    }
    long long pos, stop, given_max;
    uint64_t max_len = UINT64_MAX; /* None or absent: no limit */
    if (as_offset(args[1], &pos, "pos") < 0 || as_offset(args[2], &stop, "stop") < 0) return NULL;
    if (nargs == 6 && args[5] != Py_None) {
        if (as_offset(args[5], &given_max, "max_len") < 0) return NULL;
        max_len = given_max < 0 ? 0 : (uint64_t)given_max;
    }
    int check = PyObject_IsTrue(args[3]);
    if (check < 0) return NULL;
    PyObject *out = args[4];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "scan_frames: out must be a list");
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "scan_frames: pos must not be negative");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    const long long n = (long long)view.len;
    int status;
    for (;;) {
        if (pos >= stop) {
            status = STOPPED;
            break;
        }
        if (pos > n - 12) {
            status = NEED_MORE;
            break;
        }
        uint64_t length = load64le(b + pos);
        if (check && mask_crc(crc32c_buf(b + pos, 8)) != load32le(b + pos + 8)) {
            status = BAD_LENGTH_CRC;
            break;
        }
        if (length > max_len) {
            status = TOO_LARGE; /* before anything is gathered for it */
            break;
        }
        long long data_start = pos + 12;
        /* the data and its 4-byte CRC must fit in what is left; never trust length */
        if (n - data_start < 4 || length > (uint64_t)(n - data_start - 4)) {
            status = NEED_MORE;
            break;
        }
        long long data_end = data_start + (long long)length;
        if (check && mask_crc(crc32c_nogil(b + data_start, (size_t)length)) != load32le(b + data_end)) {
            status = BAD_DATA_CRC;
            break;
        }
        if (append_int(out, data_start) < 0 || append_int(out, (long long)length) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        pos = data_end + 4;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Li)", pos, status);
}

/* RecordScanner(buf, view, base, pos, stop, check_crc, views_only=False, max_len=None): an iterator
 * over the whole frames of buf from pos, yielding (file_offset, view[data]) (or only
 * the views), with the same stopping rules as scan_frames. After it is exhausted,
 * .pos and .status say where and why it stopped. An iterator (rather than a list)
 * so that no batch of tuples piles up for the garbage collector to walk. */
typedef struct {
    PyObject_HEAD
    PyObject *buf;
    PyObject *mv;
    Py_buffer view;
    long long base, pos, stop;
    uint64_t max_len;
    int check, views_only, status, done;
} RecordScanner;

static void scanner_dealloc(RecordScanner *self) {
    if (self->buf) PyBuffer_Release(&self->view);
    Py_XDECREF(self->buf);
    Py_XDECREF(self->mv);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "view", "base", "pos", "stop", "check_crc", "views_only", "max_len", NULL};
    PyObject *buf, *mv, *obase, *opos, *ostop, *omax = Py_None;
    int check, views_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOOp|pO", kwlist, &buf, &PyMemoryView_Type, &mv, &obase, &opos,
                                     &ostop, &check, &views_only, &omax))
        return NULL;
    long long base, pos, stop, given_max;
    uint64_t max_len = UINT64_MAX; /* None: no limit */
    if (as_offset(obase, &base, "base") < 0 || as_offset(opos, &pos, "pos") < 0 || as_offset(ostop, &stop, "stop") < 0)
        return NULL;
    if (omax != Py_None) {
        if (as_offset(omax, &given_max, "max_len") < 0) return NULL;
        max_len = given_max < 0 ? 0 : (uint64_t)given_max;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "RecordScanner: pos must not be negative");
        return NULL;
    }
    RecordScanner *self = (RecordScanner *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (PyObject_GetBuffer(buf, &self->view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(buf);
    self->buf = buf;
    Py_INCREF(mv);
    self->mv = mv;
    if (PyMemoryView_GET_BUFFER(mv)->len != self->view.len) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_ValueError, "RecordScanner: view must cover the whole buffer");
        return NULL;
    }
    self->base = base;
    self->pos = pos;
    self->stop = stop;
    self->check = check;
    self->max_len = max_len;
    self->views_only = views_only;
    self->status = -1;
    return (PyObject *)self;
}

static PyObject *scanner_next(RecordScanner *self) {
    if (self->done) return NULL;
    const uint8_t *b = (const uint8_t *)self->view.buf;
    const long long n = (long long)self->view.len;
    long long pos = self->pos;
    int status;
    if (pos >= self->stop) status = STOPPED;
    else if (pos > n - 12) status = NEED_MORE;
    else {
        uint64_t length = load64le(b + pos);
        long long data_start = pos + 12;
        if (self->check && mask_crc(crc32c_buf(b + pos, 8)) != load32le(b + pos + 8)) status = BAD_LENGTH_CRC;
        else if (length > self->max_len) status = TOO_LARGE;
        else if (n - data_start < 4 || length > (uint64_t)(n - data_start - 4)) status = NEED_MORE;
        else {
            long long data_end = data_start + (long long)length;
            if (self->check && mask_crc(crc32c_nogil(b + data_start, (size_t)length)) != load32le(b + data_end)) {
                status = BAD_DATA_CRC;
            } else {
                PyObject *slice = PySequence_GetSlice(self->mv, (Py_ssize_t)data_start, (Py_ssize_t)data_end);
                if (!slice) return NULL;
                self->pos = data_end + 4;
                if (self->views_only) return slice;
                PyObject *off = PyLong_FromLongLong(self->base + pos);
                if (!off) {
                    Py_DECREF(slice);
                    return NULL;
                }
                PyObject *item = PyTuple_New(2);
                if (!item) {
                    Py_DECREF(off);
                    Py_DECREF(slice);
                    return NULL;
                }
                PyTuple_SET_ITEM(item, 0, off);
                PyTuple_SET_ITEM(item, 1, slice);
                return item;
            }
        }
    }
    self->status = status;
    self->done = 1;
    return NULL;
}

static PyObject *scanner_get_pos(RecordScanner *self, void *closure) { return PyLong_FromLongLong(self->pos); }

static PyObject *scanner_get_status(RecordScanner *self, void *closure) {
    if (self->status < 0) Py_RETURN_NONE;
    return PyLong_FromLong(self->status);
}

static PyGetSetDef scanner_getset[] = {
    {"pos", (getter)scanner_get_pos, NULL, "buffer position of the next frame", NULL},
    {"status", (getter)scanner_get_status, NULL, "why the scan stopped (None while it runs)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tfrecord_io._speedups.RecordScanner",
    .tp_basicsize = sizeof(RecordScanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Iterator over the frames of a buffer: (file offset, data view), then .pos/.status.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)scanner_next,
    .tp_getset = scanner_getset,
    .tp_new = scanner_new,
};

/* encode_frames(payloads) -> bytes: the frames of every payload, back to back. */
static PyObject *py_encode_frames(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "encode_frames takes a sequence of bytes-like payloads");
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer *views = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_buffer));
    PyObject *result = NULL;
    Py_ssize_t got = 0, total = 0;
    if (!views) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < count; got++) {
        if (PyObject_GetBuffer(items[got], &views[got], PyBUF_SIMPLE) < 0) goto done;
        if (views[got].len > PY_SSIZE_T_MAX - 16 - total) {
            got++;
            PyErr_SetString(PyExc_OverflowError, "encode_frames: payloads too large");
            goto done;
        }
        total += views[got].len + 16;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++) {
        size_t len = (size_t)views[i].len;
        store64le(w, (uint64_t)len);
        store32le(w + 8, mask_crc(crc32c_buf(w, 8)));
        memcpy(w + 12, views[i].buf, len);
        store32le(w + 12 + len, mask_crc(crc32c_buf(w + 12, len)));
        w += len + 16;
    }
done:
    if (views) {
        for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
        PyMem_Free(views);
    }
    Py_DECREF(seq);
    return result;
}

/* ------------------------------------------------------------- index text */

/* The whitespace of Python's bytes.split(): space, \t, \n, \v, \f, \r. */
static inline int index_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Raise ValueError for the token of buf that starts at `start`, naming it and its byte offset. */
static PyObject *index_token_error(const uint8_t *buf, Py_ssize_t len, Py_ssize_t start, const char *why) {
    Py_ssize_t end = start;
    while (end < len && !index_space(buf[end]) && end - start < 40) end++;
    PyObject *token = PyBytes_FromStringAndSize((const char *)buf + start, end - start);
    if (token) {
        PyErr_Format(PyExc_ValueError, "%s %R at byte %zd", why, token, start);
        Py_DECREF(token);
    }
    return NULL;
}

/* parse_index_numbers(text) -> bytes: every whitespace-separated number of an index file's
   text, in order, as native int64s. A number is an optional sign and ASCII digits that fit
   int64; anything else raises ValueError naming the token and its byte offset. Twin:
   index._parse_index_numbers_py. */
static PyObject *py_parse_index_numbers(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t len = view.len, i = 0, count = 0;
    /* at most one number per two bytes (a digit and a separator) */
    PyObject *out = PyBytes_FromStringAndSize(NULL, ((len + 1) / 2) * (Py_ssize_t)sizeof(int64_t));
    if (!out) goto fail;
    char *w = PyBytes_AS_STRING(out);
    while (i < len) {
        if (index_space(buf[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        int negative = 0;
        if (buf[i] == '+' || buf[i] == '-') negative = buf[i++] == '-';
        Py_ssize_t digits = i;
        uint64_t value = 0;
        int overflow = 0;
        for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
            unsigned d = (unsigned)(buf[i] - '0');
            if (value > (UINT64_MAX - d) / 10)
                overflow = 1;
            else
                value = value * 10 + d;
        }
        if (i == digits || (i < len && !index_space(buf[i]))) {
            index_token_error(buf, len, start, "not a number:");
            goto fail;
        }
        if (overflow || value > (negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX)) {
            index_token_error(buf, len, start, "number out of the int64 range:");
            goto fail;
        }
        int64_t number = negative ? (int64_t)(0 - value) : (int64_t)value;
        memcpy(w + count * (Py_ssize_t)sizeof(int64_t), &number, sizeof number);
        count++;
    }
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, count * (Py_ssize_t)sizeof(int64_t)) < 0) return NULL;
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* Decimal digits of v at w; returns how many. */
static inline Py_ssize_t index_put_int(char *w, int64_t v) {
    char tmp[24];
    Py_ssize_t n = 0, k = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) w[k++] = '-';
    while (n) w[k++] = tmp[--n];
    return k;
}

/* format_index(offsets, sizes) -> bytes: "offset size\n" per record, from two int64
   buffers of the same length (the index file's text). Twin: RecordIndex._to_text_py. */
static PyObject *py_format_index(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "format_index(offsets, sizes)");
        return NULL;
    }
    Py_buffer a, b;
    if (PyObject_GetBuffer(args[0], &a, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &b, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *out = NULL;
    if (a.len != b.len || a.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "format_index: offsets and sizes must be int64 buffers of one length");
        goto done;
    }
    Py_ssize_t n = a.len / (Py_ssize_t)sizeof(int64_t);
    if (n > PY_SSIZE_T_MAX / 42) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n * 42); /* two int64s of at most 20 chars, ' ', '\n' */
    if (!out) goto done;
    char *w = PyBytes_AS_STRING(out), *start = w;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t off, size;
        memcpy(&off, (const char *)a.buf + i * 8, 8);
        memcpy(&size, (const char *)b.buf + i * 8, 8);
        w += index_put_int(w, off);
        *w++ = ' ';
        w += index_put_int(w, size);
        *w++ = '\n';
    }
    if (_PyBytes_Resize(&out, w - start) < 0) out = NULL;
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return out;
}

/* ------------------------------------------------------------- protobuf helpers */

typedef struct {
    uint8_t *data;
    size_t len, cap;
    PyObject *ba; /* if set, the bytearray that holds data: handed over as the result, not copied */
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    if (b->ba) {
        if (PyByteArray_Resize(b->ba, (Py_ssize_t)cap) < 0) return -1;
        b->data = (uint8_t *)PyByteArray_AS_STRING(b->ba);
        b->cap = cap;
        return 0;
    }
    uint8_t *d = PyMem_Realloc(b->data, cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *w, uint64_t v) {
    while (v >= 0x80) {
        *w++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *w++ = (uint8_t)v;
    return w;
}

/* Reads a varint of at most 10 bytes; 0 on truncation or an over-long encoding. */
static inline int get_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return 0;
        uint8_t byte = *p++;
        if (shift == 63 && byte > 1) return 0;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *pp = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Reads a length-delimited field body; 0 if it does not fit. */
static inline int get_len(const uint8_t **pp, const uint8_t *end, const uint8_t **body, size_t *blen) {
    uint64_t n;
    if (!get_varint(pp, end, &n)) return 0;
    if (n > (uint64_t)(end - *pp)) return 0;
    *body = *pp;
    *blen = (size_t)n;
    *pp += n;
    return 1;
}

/* ------------------------------------------------------------ Example encoding */

enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };

typedef struct {
    const char *key;
    Py_ssize_t klen;
    PyObject *value; /* borrowed: the value, or the item sequence */
    int kind;
    int is_seq;
    size_t list_len; /* bytes of the BytesList/FloatList/Int64List message */
} EncItem;

/* upb's deterministic map order: bytewise on the common prefix, then the LONGER key
 * first (so "ab" < "a" < ""), unlike a plain sort. Matched here so that both paths give
 * the same bytes; tests compare them. */
static int item_cmp(const void *a, const void *b) {
    const EncItem *x = a, *y = b;
    Py_ssize_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, (size_t)n);
    if (c) return c;
    return (x->klen < y->klen) - (x->klen > y->klen);
}

/* 1 = scalar of this kind, 0 = not handled here (let Python decide) */
static int scalar_kind(PyObject *v) {
    if (PyBytes_Check(v) || PyUnicode_Check(v)) return KIND_BYTES;
    if (PyLong_Check(v)) return KIND_INT64;
    if (PyFloat_Check(v)) return KIND_FLOAT;
    return KIND_NONE;
}

static int infer_kind(PyObject *v, int *is_seq) {
    if (PyList_Check(v) || PyTuple_Check(v)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (n == 0) return KIND_NONE; /* Python raises the "empty list" error */
        PyObject **it = PySequence_Fast_ITEMS(v);
        int has_bytes = 0, has_int = 0, has_float = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int k = scalar_kind(it[i]);
            if (k == KIND_BYTES) has_bytes = 1;
            else if (k == KIND_INT64) has_int = 1;
            else if (k == KIND_FLOAT) has_float = 1;
            else return KIND_NONE;
        }
        *is_seq = 1;
        if (has_bytes) return (has_int || has_float) ? KIND_NONE : KIND_BYTES;
        return has_float ? KIND_FLOAT : KIND_INT64;
    }
    *is_seq = 0;
    return scalar_kind(v);
}

/* The bytes of one value of a BytesList entry; 0 = not handled. */
static int bytes_of(PyObject *v, const char **p, Py_ssize_t *n) {
    if (PyBytes_Check(v)) {
        *p = PyBytes_AS_STRING(v);
        *n = PyBytes_GET_SIZE(v);
        return 1;
    }
    if (PyUnicode_Check(v)) {
        *p = PyUnicode_AsUTF8AndSize(v, n);
        if (!*p) {
            PyErr_Clear(); /* e.g. lone surrogates: Python raises the clear error */
            return 0;
        }
        return 1;
    }
    return 0;
}

static int int_of(PyObject *v, long long *out) {
    if (!PyLong_Check(v)) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

static int float_of(PyObject *v, float *out) {
    double d;
    if (PyFloat_Check(v)) d = PyFloat_AS_DOUBLE(v);
    else if (PyLong_Check(v)) {
        d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    } else return 0;
    *out = (float)d;
    return 1;
}

/* Sizes the list message of one item; 0 = not handled. */
static int size_item(EncItem *it) {
    Py_ssize_t count = it->is_seq ? PySequence_Fast_GET_SIZE(it->value) : 1;
    PyObject **vals = it->is_seq ? PySequence_Fast_ITEMS(it->value) : &it->value;
    size_t total = 0;
    if (it->kind == KIND_BYTES) {
        for (Py_ssize_t i = 0; i < count; i++) {
            const char *p;
            Py_ssize_t n;
            if (!bytes_of(vals[i], &p, &n)) return 0;
            total += 1 + varint_size((uint64_t)n) + (size_t)n;
        }
    } else if (it->kind == KIND_INT64) {
        size_t packed = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            long long x;
            if (!int_of(vals[i], &x)) return 0;
            packed += varint_size((uint64_t)x);
        }
        if (count) total = 1 + varint_size(packed) + packed;
    } else {
        for (Py_ssize_t i = 0; i < count; i++) {
            float f;
            if (!float_of(vals[i], &f)) return 0;
        }
        size_t packed = 4 * (size_t)count;
        if (count) total = 1 + varint_size(packed) + packed;
    }
    it->list_len = total;
    return 1;
}

static uint8_t *write_item(uint8_t *w, const EncItem *it) {
    Py_ssize_t count = it->is_seq ? PySequence_Fast_GET_SIZE(it->value) : 1;
    PyObject *const *vals = it->is_seq ? PySequence_Fast_ITEMS(it->value) : &it->value;
    size_t feature_len = 1 + varint_size(it->list_len) + it->list_len;
    size_t entry_len = 1 + varint_size((uint64_t)it->klen) + (size_t)it->klen + 1 + varint_size(feature_len) + feature_len;
    *w++ = 0x0A; /* Features.feature map entry */
    w = put_varint(w, entry_len);
    *w++ = 0x0A; /* key */
    w = put_varint(w, (uint64_t)it->klen);
    memcpy(w, it->key, (size_t)it->klen);
    w += it->klen;
    *w++ = 0x12; /* value: Feature */
    w = put_varint(w, feature_len);
    *w++ = (uint8_t)((it->kind << 3) | 2); /* bytes_list = 1, float_list = 2, int64_list = 3 */
    w = put_varint(w, it->list_len);
    if (it->kind == KIND_BYTES) {
        for (Py_ssize_t i = 0; i < count; i++) {
            const char *p = "";
            Py_ssize_t n = 0;
            bytes_of(vals[i], &p, &n);
            *w++ = 0x0A;
            w = put_varint(w, (uint64_t)n);
            memcpy(w, p, (size_t)n);
            w += n;
        }
    } else if (count) {
        size_t packed = 0;
        if (it->kind == KIND_INT64) {
            long long x = 0;
            for (Py_ssize_t i = 0; i < count; i++) {
                int_of(vals[i], &x);
                packed += varint_size((uint64_t)x);
            }
            *w++ = 0x0A;
            w = put_varint(w, packed);
            for (Py_ssize_t i = 0; i < count; i++) {
                int_of(vals[i], &x);
                w = put_varint(w, (uint64_t)x);
            }
        } else {
            *w++ = 0x0A;
            w = put_varint(w, 4 * (size_t)count);
            for (Py_ssize_t i = 0; i < count; i++) {
                float f = 0.0f;
                uint32_t bits;
                float_of(vals[i], &f);
                memcpy(&bits, &f, 4);
                store32le(w, bits);
                w += 4;
            }
        }
    }
    return w;
}

/* Classifies one datum entry into `it`: its key, kind, value and list size, the way
 * codec.serialize_example would. 1 = handled here, 0 = leave the datum to Python. */
static int classify_item(EncItem *it, PyObject *key, PyObject *raw, PyObject *type_map) {
    if (!PyUnicode_Check(key)) return 0;
    it->key = PyUnicode_AsUTF8AndSize(key, &it->klen);
    if (!it->key) {
        PyErr_Clear();
        return 0;
    }
    PyObject *value = raw;
    int kind = KIND_NONE;
    if (PyTuple_Check(raw) && PyTuple_GET_SIZE(raw) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(raw, 1))) {
        /* only an exact str is looked up: that runs no Python code (__hash__, __eq__) */
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(raw, 1))) return 0;
        PyObject *k = PyDict_GetItemWithError(type_map, PyTuple_GET_ITEM(raw, 1));
        if (!k) {
            PyErr_Clear();
            return 0; /* other spellings, or a 2-tuple of values: Python decides */
        }
        kind = (int)PyLong_AsLong(k);
        value = PyTuple_GET_ITEM(raw, 0);
        if (PyList_Check(value) || PyTuple_Check(value)) {
            it->is_seq = 1;
        } else {
            int sk = scalar_kind(value);
            if (sk == KIND_NONE) return 0;
            /* Python's rules: a str/bytes is not an int or float, an int may be a float */
            if (kind == KIND_BYTES && sk != KIND_BYTES) return 0;
            if (kind == KIND_INT64 && sk != KIND_INT64) return 0;
            if (kind == KIND_FLOAT && sk == KIND_BYTES) return 0;
        }
    } else {
        kind = infer_kind(raw, &it->is_seq);
        if (kind == KIND_NONE) return 0;
    }
    if (kind < KIND_BYTES || kind > KIND_INT64) return 0;
    it->kind = kind;
    it->value = value;
    return size_item(it);
}

/* Bytes of the Features message holding the sorted items; 0 = two equal keys (Python
 * decides what that means). */
static int features_size(const EncItem *items, Py_ssize_t count, size_t *features_len) {
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const EncItem *it = &items[i];
        if (i && item_cmp(&items[i - 1], it) == 0) return 0;
        size_t feature_len = 1 + varint_size(it->list_len) + it->list_len;
        size_t entry_len = 1 + varint_size((uint64_t)it->klen) + (size_t)it->klen + 1 + varint_size(feature_len) + feature_len;
        total += 1 + varint_size(entry_len) + entry_len;
    }
    *features_len = total;
    return 1;
}

/* The serialised Example of the sorted items, whose Features message is features_len
 * bytes; NULL with an exception set on failure. */
static PyObject *write_example(const EncItem *items, Py_ssize_t count, size_t features_len) {
    size_t total = 1 + varint_size(features_len) + features_len;
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!result) return NULL;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(result);
    *w++ = 0x0A; /* Example.features */
    w = put_varint(w, features_len);
    for (Py_ssize_t i = 0; i < count; i++) w = write_item(w, &items[i]);
    if ((size_t)(w - (uint8_t *)PyBytes_AS_STRING(result)) != total) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "encode_example: size mismatch");
        return NULL;
    }
    return result;
}

/* encode_example(datum, type_map) -> bytes | None
 * datum: {key: value or (value, type)}; type_map: {type spelling: kind number}.
 * Returns the bytes upb's deterministic serialisation gives, or None for any input
 * this function does not handle (NumPy values, bad types, ...): Python then does it.
 * Steps: classify every entry, sort by upb's map order, size, write. */
static PyObject *py_encode_example(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_example(datum, type_map)");
        return NULL;
    }
    PyObject *datum = args[0], *type_map = args[1];
    if (!PyDict_CheckExact(datum)) Py_RETURN_NONE;
    Py_ssize_t count = PyDict_GET_SIZE(datum);
    if (count == 0) return PyBytes_FromStringAndSize("", 0);
    EncItem *items = PyMem_Calloc((size_t)count, sizeof(EncItem));
    if (!items) return PyErr_NoMemory();
    PyObject *key, *raw, *result = NULL;
    Py_ssize_t pos = 0, i = 0;
    size_t features_len;
    while (PyDict_Next(datum, &pos, &key, &raw)) {
        if (i >= count) goto fallback; /* cannot happen: no Python code runs in this loop */
        if (!classify_item(&items[i++], key, raw, type_map)) goto fallback;
    }
    qsort(items, (size_t)count, sizeof(EncItem), item_cmp);
    if (!features_size(items, count, &features_len)) goto fallback;
    result = write_example(items, count, features_len);
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(items);
    return result;
}

/* ------------------------------------------------------------- Example parsing */

/* Result of walking one Feature message. */
enum { FEAT_ODD = -1 };

typedef struct {
    int kind;         /* KIND_* */
    PyObject *keybytes; /* the wanted key, UTF-8 */
    Buf values;       /* numeric: raw int64 / float32 values */
    Buf lengths;      /* int64 per record */
    PyObject *column; /* bytes kind: list, one entry per record */
    const uint8_t *feat;
    size_t feat_len;
    int found;
    int spans;          /* bytes kind, spans mode: (offset, length) int64 pairs in values */
    int flat;           /* bytes kind, flat mode: the strings' bytes in values, their sizes in sizes */
    Buf sizes;          /* flat mode: int64 size per string */
    const uint8_t *base; /* start of the record being parsed (spans mode) */
} Column;

/* Modes of parse_examples (its 4th argument). */
/* MODE_FLAT_STRICT: flat, and a record with a key outside the columns is odd (None: upb
 * names the key and the record), for columns inferred from earlier records. */
enum { MODE_LISTS = 0, MODE_SPANS = 1, MODE_FLAT = 2, MODE_FLAT_STRICT = 3 };

/* Appends n bytes to b; -1 with MemoryError set if it cannot grow. */
static inline int buf_append(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* One element of a BytesList (wire type wt, body at *pp): a new bytes object in
 * `strings`, or its (offset, length) span in col->values in spans mode. Returns the
 * number of values (1), FEAT_ODD, or -2 on error. */
static inline Py_ssize_t walk_bytes_value(const uint8_t **pp, const uint8_t *end, int wt, Column *col, PyObject *strings) {
    const uint8_t *body;
    size_t blen;
    if (wt != 2 || !get_len(pp, end, &body, &blen)) return FEAT_ODD;
    if (strings) {
        PyObject *s = PyBytes_FromStringAndSize((const char *)body, (Py_ssize_t)blen);
        if (!s) return -2;
        int r = PyList_Append(strings, s);
        Py_DECREF(s);
        if (r < 0) return -2;
    } else if (col && col->spans) {
        int64_t span[2] = {(int64_t)(body - col->base), (int64_t)blen};
        if (buf_append(&col->values, span, 16) < 0) return -2;
    } else if (col && col->flat) {
        int64_t size = (int64_t)blen;
        if (buf_append(&col->values, body, blen) < 0 || buf_append(&col->sizes, &size, 8) < 0) return -2;
    }
    return 1;
}

/* One element of a FloatList: packed (wt 2) or a single fixed32 (wt 5). */
static inline Py_ssize_t walk_float_value(const uint8_t **pp, const uint8_t *end, int wt, Column *col) {
    if (wt == 2) {
        const uint8_t *body;
        size_t blen;
        if (!get_len(pp, end, &body, &blen) || (blen & 3)) return FEAT_ODD;
        if (col && buf_append(&col->values, body, blen) < 0) return -2;
        return (Py_ssize_t)(blen / 4);
    }
    if (wt == 5) {
        if (end - *pp < 4) return FEAT_ODD;
        if (col && buf_append(&col->values, *pp, 4) < 0) return -2;
        *pp += 4;
        return 1;
    }
    return FEAT_ODD;
}

/* One element of an Int64List: packed varints (wt 2) or a single varint (wt 0). */
static inline Py_ssize_t walk_int64_value(const uint8_t **pp, const uint8_t *end, int wt, Column *col) {
    if (wt == 2) {
        const uint8_t *body;
        size_t blen;
        if (!get_len(pp, end, &body, &blen)) return FEAT_ODD;
        const uint8_t *q = body, *qend = body + blen;
        if (col && buf_reserve(&col->values, 8 * blen) < 0) return -2; /* >= one byte per varint */
        Py_ssize_t count = 0;
        while (q < qend) {
            uint64_t v;
            if (!get_varint(&q, qend, &v)) return FEAT_ODD;
            if (col) {
                memcpy(col->values.data + col->values.len, &v, 8);
                col->values.len += 8;
            }
            count++;
        }
        return count;
    }
    if (wt == 0) {
        uint64_t v;
        if (!get_varint(pp, end, &v)) return FEAT_ODD;
        if (col && buf_append(&col->values, &v, 8) < 0) return -2;
        return 1;
    }
    return FEAT_ODD;
}

/* Walks the list message of kind `kind` (body of a Feature field). With emit set, adds
 * values to col (numeric) or to the list `strings` (bytes). Returns the number of
 * values, or FEAT_ODD for anything to leave to upb. */
static Py_ssize_t walk_list(int kind, const uint8_t *p, const uint8_t *end, Column *col, PyObject *strings) {
    Py_ssize_t count = 0;
    while (p < end) {
        uint64_t tag;
        if (!get_varint(&p, end, &tag)) return FEAT_ODD;
        if ((tag >> 3) != 1) return FEAT_ODD; /* unknown field */
        int wt = (int)(tag & 7);
        Py_ssize_t c;
        if (kind == KIND_BYTES) c = walk_bytes_value(&p, end, wt, col, strings);
        else if (kind == KIND_FLOAT) c = walk_float_value(&p, end, wt, col);
        else c = walk_int64_value(&p, end, wt, col);
        if (c < 0) return c;
        count += c;
    }
    return count;
}

/* Walks a Feature: its kind (KIND_NONE if unset), FEAT_ODD if odd. With col set, also
 * emits values when the kind is col->kind. */
static int walk_feature(const uint8_t *p, size_t len, Column *col, PyObject *strings, Py_ssize_t *count) {
    const uint8_t *end = p + len;
    int kind = KIND_NONE;
    *count = 0;
    while (p < end) {
        uint64_t tag;
        const uint8_t *body;
        size_t blen;
        if (!get_varint(&p, end, &tag)) return FEAT_ODD;
        int field = (int)(tag >> 3);
        if ((tag & 7) != 2 || field < 1 || field > 3) return FEAT_ODD;
        if (!get_len(&p, end, &body, &blen)) return FEAT_ODD;
        if (kind != KIND_NONE && kind != field) return FEAT_ODD; /* oneof switched: leave to upb */
        kind = field;
        int emit = col && col->kind == kind;
        Py_ssize_t c = walk_list(kind, body, body + blen, emit ? col : NULL, emit ? strings : NULL);
        if (c == -2) return -2;
        if (c < 0) return FEAT_ODD;
        *count += c;
    }
    return kind;
}

static int has_high_bit(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] & 0x80) return 1;
    return 0;
}

/* Finds the wanted features of one Example. 1 = ok, 0 = odd (use upb), -2 = error.
 * strict: a key that is not a column is odd too. */
static int index_example(const uint8_t *p, size_t len, Column *cols, Py_ssize_t ncols, int strict) {
    const uint8_t *end = p + len;
    for (Py_ssize_t j = 0; j < ncols; j++) cols[j].found = 0;
    while (p < end) {
        uint64_t tag;
        const uint8_t *fbody;
        size_t flen;
        if (!get_varint(&p, end, &tag)) return 0;
        if (tag != 0x0A || !get_len(&p, end, &fbody, &flen)) return 0; /* Example.features */
        const uint8_t *q = fbody, *qend = fbody + flen;
        while (q < qend) {
            const uint8_t *entry;
            size_t elen;
            if (!get_varint(&q, qend, &tag)) return 0;
            if (tag != 0x0A || !get_len(&q, qend, &entry, &elen)) return 0; /* map entry */
            const uint8_t *r = entry, *rend = entry + elen;
            const uint8_t *key = (const uint8_t *)"", *feat = (const uint8_t *)"";
            size_t klen = 0, feat_len = 0;
            int seen_key = 0, seen_value = 0;
            while (r < rend) {
                const uint8_t *body;
                size_t blen;
                if (!get_varint(&r, rend, &tag)) return 0;
                if (!get_len(&r, rend, &body, &blen)) return 0;
                if (tag == 0x0A && !seen_key) {
                    key = body;
                    klen = blen;
                    seen_key = 1;
                } else if (tag == 0x12 && !seen_value) {
                    feat = body;
                    feat_len = blen;
                    seen_value = 1;
                } else return 0;
            }
            Py_ssize_t j;
            for (j = 0; j < ncols; j++) {
                PyObject *kb = cols[j].keybytes;
                if ((size_t)PyBytes_GET_SIZE(kb) == klen && memcmp(PyBytes_AS_STRING(kb), key, klen) == 0) break;
            }
            if (j < ncols) { /* a later entry for the same key replaces an earlier one */
                if (cols[j].found) { /* upb still parses the replaced one: check it */
                    Py_ssize_t c;
                    int k = walk_feature(cols[j].feat, cols[j].feat_len, NULL, NULL, &c);
                    if (k == -2) return -2;
                    if (k < 0) return 0;
                }
                cols[j].found = 1;
                cols[j].feat = feat;
                cols[j].feat_len = feat_len;
            } else {
                Py_ssize_t c;
                if (strict) return 0; /* a key the columns lack: upb names it */
                if (has_high_bit(key, klen)) return 0; /* upb checks UTF-8: let it */
                int k = walk_feature(feat, feat_len, NULL, NULL, &c);
                if (k == -2) return -2;
                if (k < 0) return 0;
            }
        }
    }
    return 1;
}

static void free_columns(Column *cols, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++) {
        if (cols[j].values.ba) Py_DECREF(cols[j].values.ba);
        else PyMem_Free(cols[j].values.data);
        PyMem_Free(cols[j].lengths.data);
        PyMem_Free(cols[j].sizes.data);
        Py_XDECREF(cols[j].column);
    }
    PyMem_Free(cols);
}

/* Sets up one Column per wanted key: its key bytes, kind, and the output it fills.
 * 0 = ok, -1 = error set (bad keys or kinds, no memory). */
static int init_columns(Column *cols, PyObject *keys, PyObject *kinds, Py_ssize_t ncols, int mode, Py_ssize_t nrec) {
    for (Py_ssize_t j = 0; j < ncols; j++) {
        cols[j].keybytes = PySequence_Fast_GET_ITEM(keys, j);
        cols[j].kind = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(kinds, j));
        if (cols[j].kind == -1 && PyErr_Occurred()) return -1;
        if (!PyBytes_Check(cols[j].keybytes) || cols[j].kind < KIND_BYTES || cols[j].kind > KIND_INT64) {
            PyErr_SetString(PyExc_ValueError, "parse_examples: keys must be bytes and kinds 1, 2 or 3");
            return -1;
        }
        cols[j].spans = mode == MODE_SPANS && cols[j].kind == KIND_BYTES;
        cols[j].flat = mode == MODE_FLAT && cols[j].kind == KIND_BYTES;
        /* flat mode: values grow in a bytearray that becomes the result (large images or
         * float arrays are copied once, from the records, and not again at the end) */
        if (mode == MODE_FLAT && !(cols[j].values.ba = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
        if (cols[j].kind == KIND_BYTES && !cols[j].spans && !cols[j].flat) {
            if (!(cols[j].column = PyList_New(0))) return -1;
        } else if (buf_reserve(&cols[j].lengths, 8 * (size_t)(nrec ? nrec : 1)) < 0) return -1;
    }
    return 0;
}

/* Adds one record's values of the (found) feature of column c, whose record starts at
 * base. 1 = ok, 0 = odd (use upb), -2 = error. */
static int emit_column(Column *c, const uint8_t *base) {
    PyObject *strings = NULL;
    c->base = base;
    int as_list = c->kind == KIND_BYTES && !c->spans && !c->flat;
    if (as_list && !(strings = PyList_New(0))) return -2;
    Py_ssize_t count;
    int ok = 1;
    int k = walk_feature(c->feat, c->feat_len, c, strings, &count);
    if (k == -2) ok = -2;
    else if (k < 0 || (k != KIND_NONE && k != c->kind)) ok = 0;
    else if (as_list) {
        if (PyList_Append(c->column, strings) < 0) ok = -2;
    } else {
        int64_t n64 = (int64_t)count;
        memcpy(c->lengths.data + c->lengths.len, &n64, 8); /* reserved for every record */
        c->lengths.len += 8;
    }
    Py_XDECREF(strings);
    return ok;
}

/* Parses one record into the columns. 1 = ok, 0 = odd (a key missing, ...: use upb),
 * -2 = error set. With missing_ok (flat mode), a missing key is a count of -1. */
static int parse_record(PyObject *record, Column *cols, Py_ssize_t ncols, int missing_ok, int strict) {
    Py_buffer view;
    if (PyObject_GetBuffer(record, &view, PyBUF_SIMPLE) < 0) return -2;
    int ok = index_example((const uint8_t *)view.buf, (size_t)view.len, cols, ncols, strict);
    for (Py_ssize_t j = 0; ok == 1 && j < ncols; j++) {
        if (cols[j].found) ok = emit_column(&cols[j], (const uint8_t *)view.buf);
        else if (missing_ok) {
            int64_t missing = -1;
            memcpy(cols[j].lengths.data + cols[j].lengths.len, &missing, 8); /* reserved per record */
            cols[j].lengths.len += 8;
        } else ok = 0;
    }
    PyBuffer_Release(&view);
    return ok;
}

/* The result list: per column its list of string lists, or (values, lengths) as
 * bytearrays. The columns' lists are handed over. NULL with an error set on failure. */
static PyObject *columns_result(Column *cols, Py_ssize_t ncols) {
    PyObject *result = PyList_New(ncols);
    if (!result) return NULL;
    for (Py_ssize_t j = 0; j < ncols; j++) {
        Column *c = &cols[j];
        PyObject *item;
        if (c->kind == KIND_BYTES && !c->spans && !c->flat) {
            item = c->column;
            c->column = NULL;
        } else {
            PyObject *v;
            if (c->values.ba) { /* handed over at its length (a shrink: no copy) */
                v = PyByteArray_Resize(c->values.ba, (Py_ssize_t)c->values.len) < 0 ? NULL : c->values.ba;
                Py_XINCREF(v);
            } else v = PyByteArray_FromStringAndSize((const char *)c->values.data, (Py_ssize_t)c->values.len);
            PyObject *l = v ? PyByteArray_FromStringAndSize((const char *)c->lengths.data, (Py_ssize_t)c->lengths.len) : NULL;
            PyObject *z = NULL;
            if (l && c->flat) z = PyByteArray_FromStringAndSize((const char *)c->sizes.data, (Py_ssize_t)c->sizes.len);
            if (c->flat) item = z ? PyTuple_Pack(3, v, l, z) : NULL;
            else item = l ? PyTuple_Pack(2, v, l) : NULL;
            Py_XDECREF(v);
            Py_XDECREF(l);
            Py_XDECREF(z);
        }
        if (!item) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, j, item);
    }
    return result;
}

/* parse_examples(records, keys, kinds[, mode]) -> list | None
 * records: sequence of bytes-like serialized Examples; keys: sequence of bytes (UTF-8
 * feature names); kinds: sequence of KIND_* (1 bytes, 2 float, 3 int64).
 * Returns, per key: for numbers (values, lengths) as bytearrays of little-endian
 * float32/int64 values and int64 counts per record; for bytes a list with, per record,
 * the list of its byte strings, or with spans true (values, lengths) where values holds
 * an int64 (offset, length) pair per string, its place in its record: no copy of the
 * strings, for callers that slice the records themselves (large images, audio).
 * Mode 2 (flat, for Arrow columns): bytes as (values, counts, sizes): the strings'
 * bytes end to end, the count per record and the int64 size of each string; in this
 * mode a key a record lacks is a count of -1 (every kind) instead of a reason for None.
 * Mode 3 (flat, strict): as mode 2, and a record with a key outside `keys` gives None.
 * None when any record has something this parser leaves to upb: a missing key, a type
 * other than the described one, unknown fields, ...
 * Steps: set up the columns, parse every record into them, hand them over. */
static PyObject *py_parse_examples(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "parse_examples(records, keys, kinds[, mode])");
        return NULL;
    }
    long mode = MODE_LISTS;
    if (nargs == 4) {
        mode = PyLong_AsLong(args[3]); /* True / False are 1 / 0 */
        if (mode == -1 && PyErr_Occurred()) return NULL;
        if (mode < MODE_LISTS || mode > MODE_FLAT_STRICT) {
            PyErr_SetString(PyExc_ValueError,
                            "parse_examples: mode must be 0 (lists), 1 (spans), 2 (flat) or 3 (flat, strict)");
            return NULL;
        }
    }
#ifdef TFRIO_BIG_ENDIAN
    Py_RETURN_NONE;
#endif
    PyObject *recs = PySequence_Fast(args[0], "records must be a sequence");
    if (!recs) return NULL;
    PyObject *keys = PySequence_Fast(args[1], "keys must be a sequence");
    PyObject *kinds = keys ? PySequence_Fast(args[2], "kinds must be a sequence") : NULL;
    PyObject *result = NULL;
    Column *cols = NULL;
    Py_ssize_t ncols = 0;
    if (!kinds) goto done;
    ncols = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(kinds) != ncols) {
        PyErr_SetString(PyExc_ValueError, "parse_examples: keys and kinds differ in length");
        goto done;
    }
    cols = PyMem_Calloc(ncols ? (size_t)ncols : 1, sizeof(Column));
    if (!cols) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nrec = PySequence_Fast_GET_SIZE(recs);
    if (init_columns(cols, keys, kinds, ncols, mode >= MODE_FLAT ? MODE_FLAT : (int)mode, nrec) < 0) goto done;
    for (Py_ssize_t i = 0; i < nrec; i++) {
        int ok = parse_record(PySequence_Fast_GET_ITEM(recs, i), cols, ncols, mode >= MODE_FLAT, mode == MODE_FLAT_STRICT);
        if (ok == -2) goto done;
        if (ok == 0) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    result = columns_result(cols, ncols);
done:
    if (cols) free_columns(cols, ncols);
    Py_XDECREF(kinds);
    Py_XDECREF(keys);
    Py_DECREF(recs);
    return result;
}

/* ----------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_O, "CRC32C of a bytes-like object."},
    {"masked_crc32c", py_masked_crc32c, METH_O, "TFRecord's masked CRC32C of a bytes-like object."},
    {"_crc_impl", py_crc_impl, METH_O, "Tests: choose the CRC32C code ('table', 'sse4.2', 'vpclmulqdq'); returns the previous one."},
    {"scan_frames", (PyCFunction)(void (*)(void))py_scan_frames, METH_FASTCALL,
     "scan_frames(buf, pos, stop, check_crc, out) -> (pos, status); see framing._scan_frames_py."},
    {"encode_frames", py_encode_frames, METH_O, "encode_frames(payloads) -> bytes of their frames."},
    {"parse_index_numbers", py_parse_index_numbers, METH_O,
     "parse_index_numbers(text) -> bytes of the int64s of an index file's text; see index._parse_index_numbers_py."},
    {"format_index", (PyCFunction)(void (*)(void))py_format_index, METH_FASTCALL,
     "format_index(offsets, sizes) -> index file text (int64 buffers); see RecordIndex._to_text_py."},
    {"encode_example", (PyCFunction)(void (*)(void))py_encode_example, METH_FASTCALL,
     "encode_example(datum, type_map) -> deterministic Example bytes, or None to use upb."},
    {"parse_examples", (PyCFunction)(void (*)(void))py_parse_examples, METH_FASTCALL,
     "parse_examples(records, keys, kinds[, mode]) -> columns, or None to use upb."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tfrecord_io._speedups",
                                    "Compiled core of tfrecord_io (optional; pure-Python twins exist).", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init_tables();
    crc_init_shift(crc_shift_long, CRC_LONG);
    crc_init_shift(crc_shift_short, CRC_SHORT);
    crc_init_fold();
#ifdef TFRIO_X86_CRC
    __builtin_cpu_init();
#endif
    crc_have_hw = cpu_has_sse42();
    crc_have_vpclmul = cpu_has_vpclmul();
    if (PyType_Ready(&RecordScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RecordScannerType);
    if (PyModule_AddObject(m, "RecordScanner", (PyObject *)&RecordScannerType) < 0) {
        Py_DECREF(&RecordScannerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", crc_have_hw) < 0 ||
        PyModule_AddStringConstant(m, "CRC_IMPL", crc_impl_name()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
