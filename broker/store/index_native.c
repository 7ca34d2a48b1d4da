/* The message index's per-key work in C: key values from stored properties, Java's String.hashCode, and the
 * writes of entries and slots into an index file's mapping. Built by `make` (python -m broker.store.build_native)
 * into broker/store/index_native; broker/store/index_keys.py and index_file.py keep the pure-Python path, which
 * tests/unit/store/test_index_native.py checks this against (same hashes, same file bytes).
 *
 * keys(prefixes, props, phys, stamps) -> (hashes, key_phys, key_stamps, fixups)
 *     For record i: its UNIQ_KEY, then each non-empty space-separated key of its KEYS (the first occurrence of
 *     each property, at the start or after a \x02). The hash of "topic#value" continues from prefixes[i], the
 *     hash of "topic#" mod 2**32, over the value's bytes; abs() of the signed result, 0 for Integer.MIN_VALUE.
 *     A value with a byte >= 0x80 is not ASCII: its hash is left as -1 and (output position, record index, value
 *     start, value end) goes to fixups, for the exact UTF-16 path in Python.
 * missing_pages(hashes, slots, slot_pages) -> list of the slot pages (4 KiB) the hashes touch whose byte in
 *     slot_pages is 0 (their disk blocks must be reserved before any write; IndexFile._reserve).
 * write(buffer, slots, entries_at, count, begin_ts, hashes, phys, stamps) -> new slots used
 *     IndexFile.put_many's writes, key by key in order: entry count + i links to the slot's previous entry (0 when
 *     the slot is empty or names no entry below count, unless this call wrote it), then the slot names it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 40
#define ENTRY_SIZE 20

static inline uint32_t key_hash(uint32_t u) {
    int32_t v = (int32_t)u;
    if (v == INT32_MIN) return 0;
    return (uint32_t)(v < 0 ? -v : v);
}

static inline uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* where the value of property `key` starts (-1: absent) and ends */
static Py_ssize_t find_value(const unsigned char *p, Py_ssize_t n, const char *key, Py_ssize_t klen,
                             Py_ssize_t *end) {
    Py_ssize_t start = -1;
    if (n > klen && memcmp(p, key, klen) == 0 && p[klen] == 1) {
        start = klen + 1;
    } else {
        for (Py_ssize_t i = 0; i + klen + 1 < n; i++) {
            const unsigned char *hit = memchr(p + i, 2, n - i);
            if (hit == NULL) break;
            i = hit - p;
            if (i + klen + 1 < n && memcmp(p + i + 1, key, klen) == 0 && p[i + 1 + klen] == 1) {
                start = i + klen + 2;
                break;
            }
        }
    }
    if (start < 0) return -1;
    const unsigned char *stop = start < n ? memchr(p + start, 2, n - start) : NULL;
    *end = stop ? stop - p : n;
    return start;
}

typedef struct {
    PyObject *hashes, *phys, *stamps, *fixups;
} Out;

static int emit(Out *out, uint32_t prefix, const unsigned char *p, Py_ssize_t s, Py_ssize_t e, Py_ssize_t rec,
                PyObject *phy, PyObject *stamp) {
    uint32_t h = prefix;
    int ascii = 1;
    for (Py_ssize_t i = s; i < e; i++) {
        if (p[i] & 0x80) { ascii = 0; break; }
        h = 31u * h + p[i];
    }
    PyObject *hash = ascii ? PyLong_FromUnsignedLong(key_hash(h)) : PyLong_FromLong(-1);
    if (hash == NULL) return -1;
    if (!ascii) {
        PyObject *fix = Py_BuildValue("(nnnn)", PyList_GET_SIZE(out->hashes), rec, s, e);
        if (fix == NULL || PyList_Append(out->fixups, fix) < 0) { Py_XDECREF(fix); Py_DECREF(hash); return -1; }
        Py_DECREF(fix);
    }
    int bad = PyList_Append(out->hashes, hash) < 0 || PyList_Append(out->phys, phy) < 0 ||
              PyList_Append(out->stamps, stamp) < 0;
    Py_DECREF(hash);
    return bad ? -1 : 0;
}

static PyObject *keys(PyObject *self, PyObject *args) {
    PyObject *prefixes, *props, *phys, *stamps;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyList_Type, &prefixes, &PyList_Type, &props, &PyList_Type, &phys,
                          &PyList_Type, &stamps))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(props);
    if (PyList_GET_SIZE(prefixes) != n || PyList_GET_SIZE(phys) != n || PyList_GET_SIZE(stamps) != n) {
        PyErr_SetString(PyExc_ValueError, "prefixes, props, phys and stamps must have one item per record");
        return NULL;
    }
    Out out = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    if (!out.hashes || !out.phys || !out.stamps || !out.fixups) goto fail;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint32_t prefix = (uint32_t)PyLong_AsUnsignedLongMask(PyList_GET_ITEM(prefixes, r));
        if (PyErr_Occurred()) goto fail;
        Py_buffer view;
        if (PyObject_GetBuffer(PyList_GET_ITEM(props, r), &view, PyBUF_SIMPLE) < 0) goto fail;
        const unsigned char *p = view.buf;
        Py_ssize_t len = view.len, e = 0, s;
        PyObject *phy = PyList_GET_ITEM(phys, r), *stamp = PyList_GET_ITEM(stamps, r);
        int bad = 0;
        s = find_value(p, len, "UNIQ_KEY", 8, &e);
        if (s >= 0 && e > s) bad = emit(&out, prefix, p, s, e, r, phy, stamp);
        if (!bad) {
            s = find_value(p, len, "KEYS", 4, &e);
            if (s >= 0) {
                Py_ssize_t k = s;
                for (Py_ssize_t i = s; i <= e && !bad; i++) {
                    if (i == e || p[i] == ' ') {
                        if (i > k) bad = emit(&out, prefix, p, k, i, r, phy, stamp);
                        k = i + 1;
                    }
                }
            }
        }
        PyBuffer_Release(&view);
        if (bad) goto fail;
    }
    return Py_BuildValue("(NNNN)", out.hashes, out.phys, out.stamps, out.fixups);
fail:
    Py_XDECREF(out.hashes); Py_XDECREF(out.phys); Py_XDECREF(out.stamps); Py_XDECREF(out.fixups);
    return NULL;
}

static PyObject *missing_pages(PyObject *self, PyObject *args) {
    PyObject *hashes, *pages;
    long long slots;
    if (!PyArg_ParseTuple(args, "O!LO!", &PyList_Type, &hashes, &slots, &PyByteArray_Type, &pages)) return NULL;
    if (slots <= 0) { PyErr_SetString(PyExc_ValueError, "slots must be positive"); return NULL; }
    unsigned char *known = (unsigned char *)PyByteArray_AS_STRING(pages);
    Py_ssize_t npages = PyByteArray_GET_SIZE(pages);
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hashes); i++) {
        long long h = PyLong_AsLongLong(PyList_GET_ITEM(hashes, i));
        if (h < 0) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative hash"); goto fail; }
        long long page = (HEADER_SIZE + (h % slots) * 4) >> 12;
        if (page >= npages) { PyErr_SetString(PyExc_ValueError, "slot page outside the file"); goto fail; }
        if (!known[page]) {
            known[page] = 2;  /* listed once; the caller reserves it and sets it to 1 */
            PyObject *v = PyLong_FromLongLong(page);
            if (v == NULL || PyList_Append(out, v) < 0) { Py_XDECREF(v); goto fail; }
            Py_DECREF(v);
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++)  /* not reserved yet: the caller marks each it reserves */
        known[PyLong_AsLongLong(PyList_GET_ITEM(out, i))] = 0;
    return out;
fail:
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) known[PyLong_AsLongLong(PyList_GET_ITEM(out, i))] = 0;
    Py_DECREF(out);
    return NULL;
}

static PyObject *write_entries(PyObject *self, PyObject *args) {
    PyObject *buffer, *hashes, *phys, *stamps;
    long long slots, entries_at, count, begin_ts;
    if (!PyArg_ParseTuple(args, "OLLLLO!O!O!", &buffer, &slots, &entries_at, &count, &begin_ts, &PyList_Type,
                          &hashes, &PyList_Type, &phys, &PyList_Type, &stamps))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(hashes);
    if (PyList_GET_SIZE(phys) != n || PyList_GET_SIZE(stamps) != n || slots <= 0 || count < 1) {
        PyErr_SetString(PyExc_ValueError, "one offset and stamp per hash, positive slots and count");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE) < 0) return NULL;
    unsigned char *m = view.buf;
    long long new_slots = 0;
    if (entries_at < HEADER_SIZE + slots * 4 || entries_at + (long long)n * ENTRY_SIZE > view.len ||
        HEADER_SIZE + slots * 4 > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the entries or slots lie outside the buffer");
        return NULL;
    }
    /* check every number first: nothing is written unless all are valid */
    for (Py_ssize_t i = 0; i < n; i++) {
        long long h = PyLong_AsLongLong(PyList_GET_ITEM(hashes, i));
        PyLong_AsLongLong(PyList_GET_ITEM(phys, i));
        PyLong_AsLongLong(PyList_GET_ITEM(stamps, i));
        if (PyErr_Occurred() || h < 0 || h > INT32_MAX) {
            PyBuffer_Release(&view);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a hash outside [0, 2**31)");
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long h = PyLong_AsLongLong(PyList_GET_ITEM(hashes, i));
        long long phy = PyLong_AsLongLong(PyList_GET_ITEM(phys, i));
        long long ts = PyLong_AsLongLong(PyList_GET_ITEM(stamps, i));
        unsigned char *slot = m + HEADER_SIZE + (h % slots) * 4;
        int32_t prev = (int32_t)get_be32(slot);
        if (prev >= count && prev < count + i) {  /* valid only if this call wrote it for this slot */
            long long earlier = PyLong_AsLongLong(PyList_GET_ITEM(hashes, prev - count));
            if (earlier % slots != h % slots) prev = 0;
        } else if (prev <= 0 || prev >= count) {
            prev = 0;
        }
        if (prev == 0) new_slots++;
        long long diff = ts >= begin_ts ? (ts - begin_ts) / 1000 : 0;
        if (diff > INT32_MAX) diff = INT32_MAX;
        unsigned char *entry = m + entries_at + (long long)i * ENTRY_SIZE;
        put_be32(entry, (uint32_t)h);
        put_be64(entry + 4, (uint64_t)phy);
        put_be32(entry + 12, (uint32_t)diff);
        put_be32(entry + 16, (uint32_t)prev);
        put_be32(slot, (uint32_t)(count + i));
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(new_slots);
}

static PyMethodDef methods[] = {
    {"keys", keys, METH_VARARGS, "index keys of records: (hashes, key_phys, key_stamps, fixups)"},
    {"missing_pages", missing_pages, METH_VARARGS, "slot pages the hashes touch that are not reserved yet"},
    {"write", write_entries, METH_VARARGS, "write entries and slots of hashes into an index file buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "index_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit_index_native(void) { return PyModule_Create(&module); }
