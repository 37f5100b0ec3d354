/* keys.c -- a key's stored form: the bytes a row holds for it (its text, or a prefix and a
 * digest), its SipHash-1-3 hash under the segment's secret key, the comparisons of a row
 * against a key (a moving log's key names, what the tools show for its digests, are moving.c's).
 *
 * layout.py ("Key table") draws a key row's header. index.c finds and inserts keys under
 * LOCK_KEY_TABLE; keycache.c keeps this process's shortcut from a key object to its row.
 */
#include "core.h"


/* ---- SipHash-1-3 with the segment's secret key: key hashes callers cannot aim ------ */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                     \
    do {                                                             \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);    \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                       \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                       \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);    \
    } while (0)

static uint64_t siphash13(uint64_t k0, uint64_t k1, const unsigned char *m, size_t len) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t last = (uint64_t)len << 56, w;
    const unsigned char *end = m + (len & ~(size_t)7);
    for (; m != end; m += 8) {
        memcpy(&w, m, 8);
        v3 ^= w; SIPROUND; v0 ^= w;
    }
    for (size_t i = 0; i < (len & 7); i++) last |= (uint64_t)m[i] << (8 * i);
    v3 ^= last; SIPROUND; v0 ^= last;
    v2 ^= 0xff; SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- keys ------------------------------------------------------------------------------ */

/* The bytes a key is stored as, and its hash: str -> UTF-8, bytes as is (exactly those two
 * types, as documented: a bytearray or memoryview could change under the key cache); long
 * keys keep a prefix and a 128-bit keyed digest of the whole. */
int encode_key(Core *c, PyObject *key, StoredKey *k) {
    const char *raw;
    Py_ssize_t len;
    k->flags = 0;
    k->raw = NULL;
    k->raw_len = 0;
    if (PyUnicode_Check(key)) {
        raw = PyUnicode_AsUTF8AndSize(key, &len);
        if (raw == NULL) return -1;
        k->flags = KEY_FLAG_STR;
    } else if (PyBytes_Check(key)) {
        raw = PyBytes_AS_STRING(key);
        len = PyBytes_GET_SIZE(key);
    } else {
        PyErr_Format(PyExc_TypeError, "a key is a str or bytes, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    k->raw = raw;
    k->raw_len = len;
    if (c->key_bytes < MAX_STORED_KEY) {  /* a moving log's row: a digest, its hash an independent one */
        uint64_t d0 = siphash13(c->hk0, c->hk1 ^ (uint64_t)k->flags, (const unsigned char *)raw, (size_t)len);
        uint64_t d1 = siphash13(c->hk1 ^ 0x9e3779b97f4a7c15ULL, c->hk0 ^ (uint64_t)k->flags, (const unsigned char *)raw,
                                (size_t)len);
        memcpy(k->bytes, &d0, 8);
        k->len = MOVING_KEY_BYTES;
        k->flags |= KEY_FLAG_DIGEST;
        k->hash = d1 & KEY_HASH_MASK ? d1 & KEY_HASH_MASK : 1;
        k->ident = (int64_t)(k->hash | (uint64_t)k->len << IDENT_LEN_SHIFT | (uint64_t)k->flags << IDENT_FLAGS_SHIFT);
        return 0;
    }
    if (len <= MAX_STORED_KEY) {
        memcpy(k->bytes, raw, (size_t)len);
        k->len = len;
    } else {
        uint64_t d0 = siphash13(c->hk0, c->hk1, (const unsigned char *)raw, (size_t)len);
        uint64_t d1 = siphash13(c->hk1, c->hk0 ^ 0x9e3779b97f4a7c15ULL, (const unsigned char *)raw,
                                (size_t)len);
        memcpy(k->bytes, raw, KEY_LONG_PREFIX);
        memcpy(k->bytes + KEY_LONG_PREFIX, &d0, 8);
        memcpy(k->bytes + KEY_LONG_PREFIX + 8, &d1, 8);
        k->len = MAX_STORED_KEY;
        k->flags |= KEY_FLAG_DIGEST;
    }
    uint64_t h = siphash13(c->hk0 ^ (uint64_t)k->flags, c->hk1, k->bytes, (size_t)k->len) & KEY_HASH_MASK;
    k->hash = h ? h : 1;  /* never 0: 0 marks an entry with no key */
    k->ident = (int64_t)(k->hash | (uint64_t)k->len << IDENT_LEN_SHIFT | (uint64_t)k->flags << IDENT_FLAGS_SHIFT);
    return 0;
}

int row_holds(char *row, const StoredKey *k) {
    return LOAD(RIDENT(row)) == k->ident && memcmp(RKEY(row), k->bytes, (size_t)k->len) == 0;
}

/* A key whose row holds its very text (encode_key): a bytes or an ASCII str of at most
 * MAX_STORED_KEY, in a table whose rows hold text (a moving log's hold digests only). */
int key_is_text(Core *c, PyObject *key) {
    if (c->key_bytes < MAX_STORED_KEY) return 0;
    if (PyBytes_CheckExact(key)) return PyBytes_GET_SIZE(key) <= MAX_STORED_KEY;
    return PyUnicode_CheckExact(key) && PyUnicode_IS_ASCII(key) && PyUnicode_GET_LENGTH(key) <= MAX_STORED_KEY;
}

/* The row holds key, a key_is_text() one: its length, kind and text, compared without its
 * hash (the text is the key; the hash only places it). Under the row's lock. */
int row_holds_text(char *row, PyObject *key) {
    int str = PyUnicode_CheckExact(key);
    const char *text = str ? (const char *)PyUnicode_DATA(key) : PyBytes_AS_STRING(key);
    uint64_t len = (uint64_t)(str ? PyUnicode_GET_LENGTH(key) : PyBytes_GET_SIZE(key));
    uint64_t ident = (uint64_t)LOAD(RIDENT(row));
    uint64_t flags = str ? KEY_FLAG_STR : 0;
    return IDENT_HASH(ident) != 0 && ident >> IDENT_FLAGS_SHIFT == flags &&
           (ident >> IDENT_LEN_SHIFT & ((1u << (IDENT_FLAGS_SHIFT - IDENT_LEN_SHIFT)) - 1)) == len &&
           memcmp(RKEY(row), text, (size_t)len) == 0;
}
